import type { Clock } from './clock.js';

/** Outcome of a capacity check. */
export const enum CapacityVerdict {
  Ok = 0,
  /** The tenant has taken its share of this node's admissions for the current second. */
  TenantShare = 1,
  /** The node has admitted its capacity for the current second. */
  NodeFull = 2,
}

/**
 * Shared admission capacity of one node, per one-second slot, with a per-tenant share (tenant
 * fairness): no tenant takes more than `share × capacity` admissions in a slot, so a noisy tenant gets
 * 503s (capacity class) while its neighbours still get through. Only counts: no identities leave it.
 */
export class AdmissionCapacity {
  private slot = -1;
  private total = 0;
  private readonly perTenant = new Map<string, number>();

  constructor(private readonly clock: Clock) {}

  /** Whether `tenant` may be admitted now under `capacity` admissions/s and its `share` (0–1]. */
  check(tenant: string, capacity: number, share: number): CapacityVerdict {
    this.rollSlot();
    if (this.total >= capacity) return CapacityVerdict.NodeFull;
    if ((this.perTenant.get(tenant) ?? 0) >= Math.max(1, Math.floor(capacity * share))) return CapacityVerdict.TenantShare;
    return CapacityVerdict.Ok;
  }

  /** Counts one admission of `tenant` in the current slot. */
  record(tenant: string): void {
    this.rollSlot();
    this.total++;
    this.perTenant.set(tenant, (this.perTenant.get(tenant) ?? 0) + 1);
  }

  private rollSlot(): void {
    const slot = Math.floor(this.clock.monotonic() / 1000);
    if (slot !== this.slot) {
      this.slot = slot;
      this.total = 0;
      this.perTenant.clear();
    }
  }
}
