/**
 * The `q` quantile (0 ≤ q ≤ 1) of values sorted ascending, by nearest rank: the value at
 * ⌊q · n⌋, the last one for q = 1; NaN when there are none.
 */
export function quantile(sorted: ArrayLike<number>, q: number): number {
  return sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}
