/**
 * A row of the benchmark table: a measured value, the reference measured in
 * the same run, their ratio and the target it is held to (BENCHMARKS.md and
 * bench/results.json).
 */
export interface BenchRow {
  benchmark: string;
  case: string;
  value: number;
  unit: string;
  reference: string;
  referenceValue: number;
  ratio: number;
  target: string;
  met: boolean;
}
