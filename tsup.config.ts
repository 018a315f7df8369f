import { defineConfig } from 'tsup';

export default defineConfig({
  entry: { index: 'src/index.ts', emulator: 'src/emulator/index.ts', cli: 'src/cli/main.ts' },
  format: ['esm', 'cjs'],
  dts: { entry: { index: 'src/index.ts', emulator: 'src/emulator/index.ts' } },
  target: 'node20',
  platform: 'node',
  sourcemap: true,
  clean: true,
  splitting: false,
  shims: false,
});
