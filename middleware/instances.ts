import { hostname } from 'node:os';
import { ConfigError } from '../lib/errors.js';

/** Node ids of the open limiters of this process. */
const taken = new Set<string>();

/**
 * A node id for a limiter given none: `hostname-pid` for the first in this process, then
 * `hostname-pid-2`, `-3`… (the first not taken by an open limiter), so limiters in one process are
 * distinct members. The limiter claims it at once (`claimNodeId`).
 */
export function defaultNodeId(): string {
  const base = `${hostname()}-${process.pid}`;
  let id = base;
  for (let n = 2; taken.has(id); n++) id = `${base}-${n}`;
  return id;
}

/**
 * Takes `nodeId` for one limiter of this process; returns the release (call it on close). Two open
 * limiters with one node id would mix their metrics' series and, on one fleet, each take the other's
 * heartbeats and ledgers for its own: the second claim throws a `ConfigError` naming `nodeId`.
 */
export function claimNodeId(nodeId: string): () => void {
  if (taken.has(nodeId)) {
    throw new ConfigError([{ path: 'nodeId', message: `"${nodeId}" is taken by another open limiter in this process; give each limiter its own nodeId, or leave it unset` }]);
  }
  taken.add(nodeId);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    taken.delete(nodeId);
  };
}
