/**
 * Peak RSS above a settled baseline, sampled every millisecond: the memory
 * cases run in fresh processes and measure with it. Sampled instead of the
 * process's lifetime maxRSS, which may come from start-up (module loading)
 * and hide the send.
 */
export interface PeakRssMeasure {
  /** RSS after a GC (with --expose-gc) and a 100 ms pause, before the measured work. */
  readonly baselineRss: number;
  /** Takes one more sample (also worth calling right after an allocation). */
  sample(): void;
  /** Stops sampling; the figures in bytes, and the extra in MiB. */
  stop(): { baselineRss: number; peakRss: number; extraMb: number };
}

/**
 * Settles the heap, takes the baseline and starts sampling.
 * @example
 * const measure = await startPeakRss();
 * await send();
 * console.log(JSON.stringify(measure.stop()));
 */
export async function startPeakRss(): Promise<PeakRssMeasure> {
  (globalThis as { gc?: () => void }).gc?.();
  await new Promise((resolve) => setTimeout(resolve, 100));
  const baselineRss = process.memoryUsage.rss();
  let peakRss = baselineRss;
  const sample = () => {
    peakRss = Math.max(peakRss, process.memoryUsage.rss());
  };
  const sampler = setInterval(sample, 1);
  return {
    baselineRss,
    sample,
    stop() {
      sample();
      clearInterval(sampler);
      return { baselineRss, peakRss, extraMb: (peakRss - baselineRss) / 2 ** 20 };
    },
  };
}
