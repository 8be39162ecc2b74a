import type { Grant, ReportBatch } from './messages.js';

/**
 * One entry of a shard's log: what an owner folds, and what a new or restarted owner replays. `ended`:
 * windows of length `windowMs` in `shard` ending at or before `end` are ended for good (an owner
 * dropped their ledgers, `lib/owner/ended.ts`); a shard's checkpoint carries one per window length.
 */
export type LogEntry =
  | { readonly kind: 'report'; readonly batch: ReportBatch }
  | { readonly kind: 'grant'; readonly grant: Grant }
  | { readonly kind: 'ended'; readonly shard: number; readonly windowMs: number; readonly end: number };
