import { defineConfig } from 'tsup';

const common = {
  target: 'node20',
  platform: 'node',
  sourcemap: true,
  splitting: false,
  // `import.meta.url` in the CommonJS build (the optional peers are loaded with createRequire).
  shims: true,
} as const;

export default defineConfig([
  {
    ...common,
    // The library: ESM and CommonJS, with types for both.
    entry: {
      index: 'src/index.ts',
      emulator: 'src/emulator/index.ts',
      queue: 'src/queue/index.ts',
      relay: 'src/relay/index.ts',
      protocol: 'src/protocol/index.ts',
    },
    format: ['esm', 'cjs'],
    dts: {
      entry: {
        index: 'src/index.ts',
        emulator: 'src/emulator/index.ts',
        queue: 'src/queue/index.ts',
        relay: 'src/relay/index.ts',
        protocol: 'src/protocol/index.ts',
      },
      compilerOptions: { stripInternal: true },
    },
    clean: true,
  },
  {
    ...common,
    // The script of a build thread (buildThreads), a file of its own beside the entry points:
    // the ES module build starts dist/build-thread.js, the CommonJS build dist/build-thread.cjs.
    // No types: it is no entry point of the package.
    entry: { 'build-thread': 'src/transport/build-threads/thread.ts' },
    format: ['esm', 'cjs'],
    clean: false,
  },
  {
    ...common,
    // The eml-api command: ESM only (the package is "type": "module").
    entry: { cli: 'src/cli/main.ts' },
    format: ['esm'],
    clean: false,
  },
]);
