import type { CliOutput } from '../cli-io.js';

/**
 * Renders a progress bar line, e.g. `[#####.....] 1500/3000`.
 *
 * @param width number of cells between the brackets
 * @example
 * renderProgressBar(1500, 3000, 10); // '[#####.....] 1500/3000'
 */
export function renderProgressBar(done: number, total: number, width = 30): string {
  const ratio = total <= 0 ? 1 : Math.min(1, Math.max(0, done / total));
  const filled = Math.floor(ratio * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total}`;
}

/**
 * Whether a progress bar may be drawn on a stream: only on a terminal, and
 * never in CI (`CI` set) or on a dumb terminal, so pipes and logs stay clean.
 */
export function canDrawProgress(stream: CliOutput, env: Readonly<Record<string, string | undefined>>): boolean {
  if (stream.isTTY !== true) return false;
  const ci = env.CI;
  if (ci !== undefined && ci !== '' && ci !== '0' && ci.toLowerCase() !== 'false') return false;
  return env.TERM !== 'dumb';
}

/**
 * A progress bar redrawn in place (carriage return) on a terminal stream.
 * When disabled it writes nothing at all.
 *
 * @example
 * const bar = new ProgressBar(io.stderr, rows.length, canDrawProgress(io.stderr, io.env));
 * bar.update(500);
 * bar.finish();
 */
export class ProgressBar {
  readonly #stream: CliOutput;
  readonly #total: number;
  readonly #enabled: boolean;
  #drawn = false;

  constructor(stream: CliOutput, total: number, enabled: boolean) {
    this.#stream = stream;
    this.#total = total;
    this.#enabled = enabled;
  }

  /** Whether the bar is drawn at all. */
  get enabled(): boolean {
    return this.#enabled;
  }

  /** Redraws the bar with `done` of the total. */
  update(done: number): void {
    if (!this.#enabled) return;
    this.#stream.write(`\r${renderProgressBar(done, this.#total)}`);
    this.#drawn = true;
  }

  /** Ends the bar's line, so that later output starts on a line of its own. */
  finish(): void {
    if (!this.#drawn) return;
    this.#stream.write('\n');
    this.#drawn = false;
  }
}
