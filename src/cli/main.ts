#!/usr/bin/env node
// Entry point of the `eml-api` binary (dist/cli.js): only runs the CLI. The
// CLI itself is runCli() in run-cli.ts, which tests import without running it.
import { runCli } from './run-cli.js';

runCli(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    // A signal while it exits (a second one sent as it stopped) exits with the command's code, not killed by it.
    const exitNow = () => process.exit(code);
    process.on('SIGINT', exitNow);
    process.on('SIGTERM', exitNow);
  },
  (err: unknown) => {
    // runCli never rejects; this is a last resort.
    console.error(err);
    process.exitCode = 1;
  },
);
