import type { PolicyDoc, WindowDef } from './policy.js';

/**
 * A fixed share below this many requests a window per node is warned about (`policy:check --fleet`).
 * Evenly spread traffic still falls on the nodes at random: at a share s a node's count varies by
 * about √s, a third of the share at 9, so some node runs past its share in many windows while
 * others still hold credit — and fixed share moves nothing between them.
 */
export const SMALL_SHARE = 10;

/** One fixed-share window too small for the fleet: its field path and why. */
export interface ShareWarning {
  readonly path: string;
  readonly message: string;
}

/**
 * The fixed-share windows of `doc` whose share ⌊limit / fleet⌋ on `fleet` nodes is below SMALL_SHARE.
 * Such a plan is still served in full (the remainder limit − fleet × share is a reserve, first come),
 * but a node whose share and the reserve are spent tells its callers to retry at the window's end.
 */
export function smallFixedShares(doc: PolicyDoc, fleet: number): ShareWarning[] {
  const out: ShareWarning[] = [];
  const check = (path: string, windows: readonly WindowDef[]): void => {
    windows.forEach((w, i) => {
      const share = Math.floor(w.limit / fleet);
      if (share >= SMALL_SHARE) return;
      const rest = w.limit - fleet * share;
      out.push({
        path: `${path}.windows.${i}`,
        message:
          `"${w.name}" (${w.limit} a window) is fixed-share: on ${fleet} nodes each gets ${share}, and ${rest} ${rest === 1 ? 'is' : 'are'} a reserve for the first to ask; ` +
          `a node past its share and the reserve tells its callers to retry at the window's end even while others hold credit — leasing suits a plan this small`,
      });
    });
  };
  for (const [name, plan] of Object.entries(doc.plans)) if ((plan.allocation ?? doc.allocation) === 'fixed-share') check(`plans.${name}`, plan.windows);
  // A per-key override with windows of its own takes the document's allocation.
  if (doc.allocation === 'fixed-share') for (const [keyId, o] of Object.entries(doc.keys ?? {})) if (o.plan === undefined && o.windows !== undefined) check(`keys.${keyId}`, o.windows);
  return out;
}
