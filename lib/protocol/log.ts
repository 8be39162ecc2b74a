import type { Blanket } from '../owner/blankets.js';
import type { Grant, ReportBatch } from './messages.js';

/**
 * One entry of a shard's log: what an owner folds, and what a new or restarted owner replays. `ended`:
 * windows of length `windowMs` in `shard` ending at or before `end` are ended for good (an owner
 * dropped their ledgers, `lib/owner/ended.ts`); a shard's checkpoint carries one per window length.
 * `unmarked`: windows of `shard` ending at or before `by` may have been dropped without a mark; with
 * no `by`, a checkpoint an older release wrote (it keeps no marks), dated by the replaying owner.
 * `blanket`: the owner may have issued one credit to its float in every window of the shard that
 * starts by the blanket's time, with no grant on record (`lib/owner/blankets.ts`).
 */
export type LogEntry =
  | { readonly kind: 'report'; readonly batch: ReportBatch }
  | { readonly kind: 'grant'; readonly grant: Grant }
  | { readonly kind: 'ended'; readonly shard: number; readonly windowMs: number; readonly end: number }
  | { readonly kind: 'unmarked'; readonly shard: number; readonly by?: number }
  | { readonly kind: 'blanket'; readonly blanket: Blanket };
