import type { Grant, ReportBatch } from './messages.js';

/** One entry of a shard's log: what an owner folds, and what a new or restarted owner replays. */
export type LogEntry = { readonly kind: 'report'; readonly batch: ReportBatch } | { readonly kind: 'grant'; readonly grant: Grant };
