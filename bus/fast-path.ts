import type { CreditRequest, Grant, OwnerMessage } from '../lib/protocol/messages.js';
import { quantile } from '../lib/quantile.js';
import type { Bodies } from './codec.js';

/** The fast path's counters, part of the Redis bus's. */
export interface FastPathStats {
  asksSent: number;
  /** Of `asksSent`, those sent over the direct channel (the rest went over Redis pub/sub). */
  asksDirect: number;
  answersLate: number;
  fastPathTimeouts: number;
}

/** What the fast path needs of its bus. */
export interface FastPathHooks {
  readonly stats: FastPathStats;
  /** Sends an ask to an owner, directly or over Redis; returns whether it went directly. */
  send(owner: string, ask: Bodies['ask']): boolean;
  /** Hands owner messages to the node (grants of an ask that missed, other messages of an answer). */
  deliver(m: OwnerMessage): void;
  /** Owner messages, less those of an owner older than the table's (a deposed owner). */
  current(messages: readonly OwnerMessage[]): OwnerMessage[];
  /** This process's node epoch: only grants to it answer an ask. */
  nodeEpoch(): string;
}

/** One request's asks: the grants it has already, and what else its answer waits for. */
export interface AskOptions {
  /** Grants already made in process. */
  readonly local: Grant[];
  /** Some request had no owner to ask: the whole ask then settles with nothing. */
  readonly missed: boolean;
  readonly deadlineMs: number;
  /**
   * Grants made in process whose log write is out: each settles with its grants once on record, with
   * none if refused. They count like an owner's answer, deadline included.
   */
  readonly unrecorded?: ReadonlyArray<Promise<readonly Grant[]>>;
}

/** Fast-path asks to several owners for one request: settled when all answered or at the deadline. */
interface AskGroup {
  remaining: number;
  readonly grants: Grant[];
  missed: boolean;
  readonly start: number;
  /** A warm-up ask: not counted in the fast-path figures. */
  readonly probe: boolean;
  /** Settled (all answered, or expired). */
  done: boolean;
  timer?: NodeJS.Timeout;
  readonly resolve: (g: readonly Grant[] | undefined) => void;
}

/**
 * The node side of the fast path (D2), whatever carries it: sends a request's asks, one per owner,
 * and settles with every grant once all are answered, or with nothing at the deadline (the grants
 * that did come are applied all the same, and so are late answers). Measures the round trip.
 */
export class FastPath {
  /** Ask ids start at a random point: a late answer meant for an earlier process of the same node id never matches. */
  private seq = Math.floor(Math.random() * 2 ** 40);
  private readonly asks = new Map<number, AskGroup>();
  private readonly rtts = new Float64Array(4096);
  private rttCount = 0;

  constructor(private readonly hooks: FastPathHooks) {}

  /** Asks `remote` owners (node id → requests) for credit, for one request (`AskOptions`). */
  ask(nodeId: string, remote: ReadonlyMap<string, CreditRequest[]>, request: AskOptions): Promise<readonly Grant[] | undefined> {
    return this.start(nodeId, remote, request, 'ask');
  }

  /**
   * Warm-up asks to `remote` owners, before the node takes traffic: sent and settled like an ask, but
   * not counted in the fast-path figures.
   */
  probe(nodeId: string, remote: ReadonlyMap<string, CreditRequest[]>, deadlineMs: number): Promise<readonly Grant[] | undefined> {
    return this.start(nodeId, remote, { local: [], missed: false, deadlineMs }, 'probe');
  }

  private start(
    nodeId: string,
    remote: ReadonlyMap<string, CreditRequest[]>,
    { local, missed, deadlineMs, unrecorded = [] }: AskOptions,
    kind: 'ask' | 'probe',
  ): Promise<readonly Grant[] | undefined> {
    const probe = kind === 'probe';
    return new Promise((resolve) => {
      const group: AskGroup = { remaining: remote.size + unrecorded.length, grants: local, missed, start: performance.now(), probe, done: false, resolve };
      for (const written of unrecorded) void written.then((grants) => this.recorded(group, grants));
      const stats = this.hooks.stats;
      for (const [owner, requests] of remote) {
        const id = ++this.seq;
        this.asks.set(id, group);
        const direct = this.hooks.send(owner, { id, nodeId, nodeEpoch: this.hooks.nodeEpoch(), requests });
        if (probe) continue;
        stats.asksSent++;
        if (direct) stats.asksDirect++;
      }
      // The deadline bounds the owner's time, not this process's: an answer that came while this
      // loop was busy (a GC pause, a starved CPU, a burst of requests) is in time if it is read in the
      // first turn of the loop after the deadline passed. Timers run before the loop reads its
      // sockets, so the ask misses only at a check (setImmediate, after the sockets are read) made
      // once the deadline had passed at the previous look. (Node's timers also count from the
      // loop's cached time, so one may fire early: the first look then says "not yet".)
      let passed = false;
      const expire = (): void => {
        if (group.done) return;
        if (!passed) {
          passed = performance.now() - group.start >= deadlineMs;
          setImmediate(expire);
          return;
        }
        if (!probe) stats.fastPathTimeouts++;
        this.finish(group, 'unanswered');
      };
      group.timer = setTimeout(expire, deadlineMs);
    });
  }

  /** Owner messages that answer ask `re` (0: none). Returns false when they answer no ask of ours. */
  answer(re: number, messages: readonly OwnerMessage[]): boolean {
    const group = re === 0 ? undefined : this.asks.get(re);
    if (group === undefined) return false;
    this.asks.delete(re);
    const rtt = performance.now() - group.start;
    if (!group.probe) this.rtts[this.rttCount++ % this.rtts.length] = rtt;
    const current = this.hooks.current(messages);
    if (group.done) {
      // Too late for its request — the deadline is hard — but the credit is kept for the next one.
      if (!group.probe) this.hooks.stats.answersLate++;
      for (const m of current) this.hooks.deliver(m);
      return true;
    }
    const epoch = this.hooks.nodeEpoch();
    for (const m of current) {
      if (m.type === 'grant' && m.nodeEpoch === epoch) group.grants.push(m);
      else this.hooks.deliver(m);
    }
    if (--group.remaining === 0) this.finish(group, 'answered');
    return true;
  }

  /** Grants made in process whose log write came back (none if it was refused). */
  private recorded(group: AskGroup, grants: readonly Grant[]): void {
    if (group.done) {
      for (const g of grants) this.hooks.deliver(g);
      return;
    }
    group.grants.push(...grants);
    if (--group.remaining === 0) this.finish(group, 'answered');
  }

  /**
   * Round trip of answered asks, late ones included: count, and p50 and p99 in ms over the last
   * 4096, or over those answered after the first `since` (a count read earlier).
   */
  rtt(since = 0): { count: number; p50: number; p99: number } {
    const n = Math.min(this.rttCount - since, this.rtts.length);
    const sorted: number[] = [];
    for (let i = this.rttCount - n; i < this.rttCount; i++) sorted.push(this.rtts[i % this.rtts.length]!);
    sorted.sort((a, b) => a - b);
    return { count: this.rttCount, p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99) };
  }

  /** Forgets asks settled over a second ago (kept that long so a late answer still has its round trip measured). */
  sweep(): void {
    const now = performance.now();
    for (const [id, a] of this.asks) if (a.done && now - a.start > 1000) this.asks.delete(id);
  }

  /** Settles every open ask with nothing (the bus is closing). */
  close(): void {
    for (const a of [...this.asks.values()]) this.finish(a, 'unanswered');
  }

  /** Settles a group: with its grants if every ask was `answered` and none missed, else with nothing. */
  private finish(group: AskGroup, how: 'answered' | 'unanswered'): void {
    if (group.done) return;
    group.done = true;
    clearTimeout(group.timer);
    if (how === 'answered' && !group.missed) group.resolve(group.grants);
    else {
      for (const g of group.grants) this.hooks.deliver(g);
      group.resolve(undefined);
    }
  }
}
