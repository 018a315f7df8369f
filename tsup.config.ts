import { defineConfig } from 'tsup';

const entries = {
  index: 'src/index.ts',
  emulator: 'src/emulator/index.ts',
  queue: 'src/queue/index.ts',
  relay: 'src/relay/index.ts',
  protocol: 'src/protocol/index.ts',
};

// Each format is one build whose entry points share their modules as chunks: a class that crosses
// entry points (EmlApiError, EmlApiQueueTransport handed to the relay) is one class, so `instanceof`
// holds between them. treeshake makes Rollup write the CommonJS chunks (esbuild splits ES modules
// only; tsup's other route rewrites `?.` and `??` into helper calls).
const common = {
  target: 'node20',
  platform: 'node',
  sourcemap: true,
  splitting: true,
  treeshake: true,
  // `import.meta.url` in the CommonJS build (the optional peers are loaded with createRequire).
  shims: true,
  dts: { entry: entries, compilerOptions: { stripInternal: true } },
} as const;

export default defineConfig([
  {
    ...common,
    // The eml-api command is ESM only (the package is "type": "module"); it shares the library's chunks.
    entry: { ...entries, cli: 'src/cli/main.ts' },
    format: ['esm'],
    clean: true,
  },
  {
    ...common,
    entry: entries,
    format: ['cjs'],
    clean: false,
  },
  {
    target: 'node20',
    platform: 'node',
    sourcemap: true,
    // The script of a build thread (buildThreads), a file of its own beside the entry points:
    // the ES module build starts dist/build-thread.js, the CommonJS build dist/build-thread.cjs.
    // No types: it is no entry point of the package.
    entry: { 'build-thread': 'src/transport/build-threads/thread.ts' },
    format: ['esm', 'cjs'],
    shims: true,
    clean: false,
  },
]);
