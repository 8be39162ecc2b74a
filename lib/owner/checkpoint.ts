import { leaseFor, type LedgerStore } from '../ledger-store.js';
import type { LogEntry } from '../protocol/log.js';
import type { Report } from '../protocol/messages.js';
import type { Blankets } from './blankets.js';
import type { EndedMarks } from './ended.js';
import type { Issuer } from './issuer.js';
import { committed, held } from './ledger-sums.js';
import type { NodeReports } from './node-reports.js';

/**
 * Rebuilds ledgers from a shard's retained log, as a restarted or new owner must before it serves:
 * grants restore what was issued (cumulative, so order and duplicates do not matter), reports what
 * was spent, self-granted and released, ended marks which windows an earlier owner dropped (never
 * issued for again), blankets the float credit an earlier owner may have issued unlogged (counted
 * in every window they cover, `Blankets.inherit`). Credit issued before a crash is never issued
 * twice. A checkpoint an older release wrote keeps no marks: its shard's windows ending by
 * `unmarkedBy` (the replaying owner's clock and the skew: every ledger that owner dropped ended
 * before) may have been dropped unmarked.
 */
export function replayLog(ledgers: LedgerStore, reports: NodeReports, marks: EndedMarks, blankets: Blankets, entries: readonly LogEntry[], unmarkedBy: number): void {
  // Blankets are counted once the whole replay is read (a later entry may retire one), in every
  // ledger of a shard that has any: made in this replay, or known before it. Only in the shards the
  // entries are of: elsewhere no blanket and no ledger changed, and counting again changes nothing.
  // (An owner not serving a shard folds each report it reads as a replay of one entry: counting in
  // every shard each time made a member short of CPU spend more of it the further behind it fell.)
  blankets.replaying = true;
  let touched: Set<number>;
  try {
    touched = replayEntries(ledgers, reports, marks, blankets, entries, unmarkedBy);
  } finally {
    blankets.replaying = false;
  }
  const counted = blankets.shards();
  for (const shard of touched) if (counted.has(shard)) for (const l of ledgers.inShard(shard)) blankets.inherit(l);
}

/** Replays `entries`; the shards they are of. */
function replayEntries(ledgers: LedgerStore, reports: NodeReports, marks: EndedMarks, blankets: Blankets, entries: readonly LogEntry[], unmarkedBy: number): Set<number> {
  const touched = new Set<number>();
  for (const e of entries) {
    if (e.kind === 'blanket') {
      blankets.replay(e.blanket, unmarkedBy);
      touched.add(e.blanket.shard);
      continue;
    }
    if (e.kind === 'ended') {
      marks.raise(e.shard, e.windowMs, e.end);
      touched.add(e.shard);
      continue;
    }
    if (e.kind === 'unmarked') {
      marks.unmark(e.shard, e.by ?? unmarkedBy);
      touched.add(e.shard);
      continue;
    }
    if (e.kind === 'report') {
      for (const r of e.batch.reports) {
        const l = ledgers.ledgerFor(r.keyId, r.windowId, r.windowMs, r.limit);
        const lease = leaseFor(l, e.batch.nodeId, e.batch.nodeEpoch, r.lease);
        touched.add(l.shard);
        // Counts are cumulative: even a report no newer than what is known adds what it knows. A
        // replayed report (a snapshot's, written from this owner's side) proves nothing about what
        // the node applied: `reported` stays as it was.
        const reported = lease.reported;
        const merged = reports.merge(e.batch.nodeId, lease, r);
        lease.reported = reported;
        if (!merged) reports.absorb(e.batch.nodeId, lease, r, r.selfGrant);
      }
      continue;
    }
    const g = e.grant;
    const l = ledgers.find(g.keyId, g.windowMs, g.windowId) ?? ledgers.ledgerFor(g.keyId, g.windowId, g.windowMs, 0);
    const lease = leaseFor(l, g.nodeId, g.nodeEpoch, g.lease);
    touched.add(l.shard);
    lease.issued = Math.max(lease.issued, g.issued);
    lease.floated = Math.max(lease.floated, g.floated ?? 0);
    lease.grantSeq = Math.max(lease.grantSeq, g.grantSeq);
    // Until a report or request states the allowance, nothing more is issued for this window. One
    // stated already stays as stated (what it lets members hold goes by it).
    if (l.unstated === true) l.allowance = Math.max(l.allowance, committed(l));
  }
  return touched;
}

/**
 * A checkpoint of the ledgers of one shard as log entries (a grant and a report per lease), the
 * ended marks and the blankets: what a later owner replays instead of the whole log behind it.
 * `replayLog` of it restores them. A ledger dropped before the checkpoint is covered by a mark, one
 * dropped after is in it, so the log the checkpoint trims never loses a window's record without
 * saying it ended. It visits that shard's ledgers only (`LedgerStore.inShard`).
 */
export function snapshotShard(ledgers: LedgerStore, issuer: Issuer, marks: EndedMarks, blankets: Blankets, shard: number): LogEntry[] {
  const entries: LogEntry[] = [...marks.entries(shard), ...blankets.entries(shard)];
  const batches = new Map<string, { nodeId: string; nodeEpoch: string; reports: Report[] }>();
  for (const l of ledgers.inShard(shard)) {
    for (const lease of l.leases) {
      if (lease.grantSeq > 0) entries.push({ kind: 'grant', grant: issuer.restate(l, lease) });
      const key = `${lease.nodeId}|${lease.nodeEpoch}`;
      let b = batches.get(key);
      if (b === undefined) batches.set(key, (b = { nodeId: lease.nodeId, nodeEpoch: lease.nodeEpoch, reports: [] }));
      b.reports.push({
        keyId: l.keyId,
        windowId: l.windowId,
        windowMs: l.windowMs,
        limit: l.allowance,
        lease: lease.lease,
        seq: lease.seq,
        spent: lease.spent,
        issued: lease.issued,
        selfIssued: lease.selfIssued,
        released: lease.released,
        demand: lease.demand,
        held: Math.max(0, held(lease)),
        selfGrant: lease.selfIssued > 0,
        ...(lease.saidFloated > 0 ? { floated: lease.saidFloated } : {}),
        ...(lease.saidBlanketed > 0 ? { blanketed: lease.saidBlanketed } : {}),
      });
    }
  }
  for (const b of batches.values()) entries.push({ kind: 'report', batch: { shard, round: 0, ...b } });
  return entries;
}
