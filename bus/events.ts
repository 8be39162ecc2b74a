import type { Cluster, Redis } from 'ioredis';
import type { LimitEvent, LimitEventSink } from './limit-event.js';

export type { LimitEvent };


/** Events kept per flush at most; beyond it a flood is counted, not stored. */
const MAX_PER_FLUSH = 2000;
/** A safety cap on the stream behind retention by age. */
const MAX_EVENTS = 10_000_000;
const SCAN = 1000;

type Client = Redis | Cluster;

/**
 * Limit events (every 429 and 503), recorded off the request path: `record` only buffers; `flush`
 * (every quarter second on a node) writes the buffer in one pipeline to `frl:{ev}:events`. Subject
 * access and erasure scan the stream for key ids; retention trims it by age.
 */
export class EventLog implements LimitEventSink {
  private buffer: LimitEvent[] = [];
  /** Events not stored because a flush was already full (a flood of denials). */
  dropped = 0;
  readonly key: string;

  constructor(
    private readonly redis: Client,
    prefix = 'frl',
  ) {
    this.key = `${prefix}:{ev}:events`;
  }

  /** Buffers an event; never blocks, never throws. */
  record(e: LimitEvent): void {
    if (this.buffer.length >= MAX_PER_FLUSH) this.dropped++;
    else this.buffer.push(e);
  }

  /** Writes what is buffered; an event that cannot be written is lost (and counted), never retried forever. */
  async flush(): Promise<void> {
    if (this.buffer.length === 0) return;
    const batch = this.buffer;
    this.buffer = [];
    const p = this.redis.pipeline();
    for (const e of batch) {
      p.xadd(this.key, 'MAXLEN', '~', String(MAX_EVENTS), '*', 'at', String(e.at), 'keyId', e.keyId, 'class', e.class, 'status', String(e.status), 'window', e.window, 'routeClass', e.routeClass, 'correlationId', e.correlationId, 'node', e.node);
    }
    try {
      await p.exec();
    } catch {
      this.dropped += batch.length;
    }
  }

  /** Every event of these key ids (subject access), oldest first. */
  async find(keyIds: readonly string[]): Promise<Array<LimitEvent & { id: string }>> {
    const out: Array<LimitEvent & { id: string }> = [];
    await this.scan(keyIds, (id, e) => out.push({ id, ...e }));
    return out;
  }

  /** Deletes every event of these key ids (erasure); returns how many. */
  async erase(keyIds: readonly string[]): Promise<number> {
    const ids: string[] = [];
    await this.scan(keyIds, (id) => ids.push(id));
    for (let i = 0; i < ids.length; i += SCAN) await this.redis.xdel(this.key, ...ids.slice(i, i + SCAN));
    return ids.length;
  }

  /** Deletes events older than `beforeMs` (retention); returns how many. */
  async trimBefore(beforeMs: number): Promise<number> {
    return this.redis.xtrim(this.key, 'MINID', String(Math.max(0, Math.floor(beforeMs))));
  }

  private async scan(keyIds: readonly string[], hit: (id: string, e: LimitEvent) => void): Promise<void> {
    const wanted = new Set(keyIds);
    let start = '-';
    for (;;) {
      const rows = await this.redis.xrange(this.key, start, '+', 'COUNT', SCAN);
      for (const [id, flat] of rows) {
        const f: Record<string, string> = {};
        for (let i = 0; i + 1 < flat.length; i += 2) f[flat[i]!] = flat[i + 1]!;
        if (wanted.has(f.keyId ?? '')) {
          hit(id, { at: Number(f.at), keyId: f.keyId!, class: f.class as LimitEvent['class'], status: Number(f.status), window: f.window ?? '', routeClass: f.routeClass ?? '', correlationId: f.correlationId ?? '', node: f.node ?? '' });
        }
      }
      if (rows.length < SCAN) return;
      start = `(${rows[rows.length - 1]![0]}`;
    }
  }
}
