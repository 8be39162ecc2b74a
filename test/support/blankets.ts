import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import type { Blanket } from '../../lib/owner/blankets.js';
import type { FoldOwnerConfig } from '../../lib/owner/config.js';
import { shardOf, type CreditRequest, type ReportBatch } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs } from '../../lib/window.js';
import { FixedFleet, ownerConfig } from './protocol.js';

/** Owners with blankets, for tests: 1 s windows over 8 shards, an owner's first blanket at NOW. */
export const W = 1000;
export const DAY = 86_400_000;
export const NOW = 5_000_000_123;
/** A time whose 1 s windows all started after NOW (an owner's first blanket) and by NOW + span. */
export const LATER = NOW + 1500;
export const HOLDER = { nodeId: 'h', nodeEpoch: 'h-e1' };
export const SHARDS = 8;
export const all = (): boolean => true;
export const ALL_SHARDS = [0, 1, 2, 3, 4, 5, 6, 7];

export interface Key {
  keyId: string;
  windowId: number;
  windowMs: number;
  shard: number;
  start: number;
}

/** A key id (22 base64url characters after `v1:`) and its window of length `windowMs` running at `at`. */
export function keyAt(i: number, at: number, windowMs = W): Key {
  const keyId = `v1:BLANKETBLANKET${String(i).padStart(6, '0')}`;
  const windowId = Math.floor((at - phaseOffset(keyId, windowMs)) / windowMs);
  return { keyId, windowId, windowMs, shard: shardOf(keyId, windowId, SHARDS), start: windowEndMs(windowId, windowMs, phaseOffset(keyId, windowMs)) - windowMs };
}

export function owner(clock: FakeClock, epoch = 7, holder = HOLDER, fleet = new FixedFleet(3), overrides: Partial<FoldOwnerConfig> = {}): FoldOwner {
  return new FoldOwner(ownerConfig(clock, fleet, { reserveRatio: 0, floatHolder: holder, ownerEpoch: () => epoch, ...overrides }));
}

export function ask(k: Key, node: string, limit = 10, need = 1, fastPath = true): CreditRequest {
  return { keyId: k.keyId, windowId: k.windowId, windowMs: k.windowMs, limit, nodeId: node, nodeEpoch: `${node}-e1`, lease: 1, spent: 0, selfIssued: 0, released: 0, need, demand: 0, fastPath };
}

/**
 * `node`'s report batch stating it holds `issued` unspent, `floated` of it out of a float and
 * `blanketed` taken itself under a blanket.
 */
export function stating(k: Key, node: string, limit: number, issued: number, floated: number, blanketed = 0): ReportBatch {
  const report = {
    keyId: k.keyId,
    windowId: k.windowId,
    windowMs: k.windowMs,
    limit,
    lease: 1,
    seq: 1,
    spent: 0,
    issued,
    selfIssued: 0,
    released: 0,
    demand: 0,
    held: issued,
    selfGrant: false,
    floated,
    ...(blanketed > 0 ? { blanketed } : {}),
  };
  return { shard: k.shard, nodeId: node, nodeEpoch: `${node}-e1`, round: 1, reports: [report] };
}

/** Floats turned on (the bus's first round) and every shard's blanket written and taken: what was written. */
export function covered(o: FoldOwner): Blanket[] {
  o.refillFloats(all);
  const due = o.blanketsDue(ALL_SHARDS, all);
  for (const b of due) o.blanketLogged(b, true);
  return due;
}
