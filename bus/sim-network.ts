import type { Clock } from '../lib/clock.js';

/** Delays a delivery; the simulator's event queue implements it on a virtual clock. */
export interface Scheduler {
  after(delayMs: number, run: () => void): void;
}

/** Faults injected into every message (simulator and tests). */
export interface BusFaults {
  /** One-way latency, ms. */
  readonly latencyMs: number;
  /** Uniform random extra latency, ms. */
  readonly jitterMs: number;
  /** Probability that a message is lost. */
  readonly loss: number;
  /** Probability that a message is delivered twice. */
  readonly duplicate: number;
  /** Uniform random extra delay that reorders messages, ms. */
  readonly reorderMs: number;
  /** A slow tail: with probability `p` a message takes up to `ms` more (uniform), as a busy host's do. */
  readonly tail?: { readonly p: number; readonly ms: number };
  /** Whether nothing passes from `from` to `to` right now (partitions, an unreachable owner). */
  readonly blocked: (from: string, to: string) => boolean;
  /**
   * Until when (ms, the scheduler's clock) the process of `nodeId` is paused, if it is: what is sent to
   * it waits until then, and an owner that is paused answers no ask in time.
   */
  readonly pausedUntil?: (nodeId: string) => number;
}

/**
 * The network between simulated members: each message's transit time (latency, jitter, reordering, a
 * slow tail) or its loss, duplicates, and deliveries held while their receiver's process is paused.
 */
export class SimNetwork {
  constructor(
    private readonly clock: Clock,
    private readonly scheduler: Scheduler | undefined,
    private readonly faults: BusFaults | undefined,
    private readonly random: () => number,
    private readonly stats: { messages: number; lost: number },
  ) {}

  /** One-way transit time from `from` to `to`, or undefined if the message is lost or blocked. */
  transit(from: string, to: string): number | undefined {
    const f = this.faults;
    this.stats.messages++;
    if (f === undefined) return 0;
    const rand = this.random;
    if (f.blocked(from, to) || rand() < f.loss) {
      this.stats.lost++;
      return undefined;
    }
    const slow = f.tail !== undefined && rand() < f.tail.p ? rand() * f.tail.ms : 0;
    return f.latencyMs + rand() * f.jitterMs + rand() * f.reorderMs + slow;
  }

  /** Carries `run` from `from` to `to` on the scheduler: after a transit, maybe twice, or never. */
  send(from: string, to: string, run: () => void): void {
    const scheduler = this.scheduler!;
    // What lands while its receiver is paused waits for it to resume.
    const land = (): void => {
      const resume = this.pausedUntil(to, 0);
      if (resume === undefined) run();
      else scheduler.after(resume, land);
    };
    const t = this.transit(from, to);
    if (t === undefined) return;
    scheduler.after(t, land);
    const f = this.faults;
    if (f !== undefined && this.random() < f.duplicate) {
      const again = this.transit(from, to);
      if (again !== undefined) scheduler.after(again, land);
    }
  }

  /** If `nodeId` is paused `inMs` from now, how long after now it resumes. */
  pausedUntil(nodeId: string, inMs: number): number | undefined {
    const until = this.faults?.pausedUntil?.(nodeId);
    const at = this.clock.now() + inMs;
    return until !== undefined && until > at ? until - this.clock.now() : undefined;
  }
}
