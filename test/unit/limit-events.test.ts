import { expect } from 'chai';
import { EventAggregator } from '../../bus/event-aggregator.js';
import { clip, decodeEvent, encodeEvent, EVENT_DEFAULTS, MAX_ENTRY_BYTES, maxEntries, parseEventOptions } from '../../bus/event-entry.js';
import type { LimitRefusal } from '../../bus/limit-event.js';
import { ConfigError } from '../../lib/errors.js';
import { runningWindowEndMs } from '../../lib/window.js';
import { parseOptions } from '../../middleware/options.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';

const T0 = 1_800_000_000_000;
const KEY = 'v1:AAAAAAAAAAAAAAAAAAAAAA';

function refusal(over: Partial<LimitRefusal> = {}): LimitRefusal {
  return { at: T0, keyId: KEY, class: 'quota', status: 429, window: 'burst', routeClass: 'default', correlationId: 'c', node: 'n1', ...over };
}

describe('limit events: aggregation per key id, window and route class', () => {
  it('a flood of N refusals for one key in one window is one event counting N, first and last right, written when the window ends', () => {
    const agg = new EventAggregator(10_000, 60_000);
    const windowEndsAt = T0 + 1000;
    const N = 35_927;
    for (let i = 0; i < N; i++) agg.add(refusal({ at: T0 + Math.floor((i * 1000) / N), correlationId: `c${i}`, windowEndsAt }));
    expect(agg.size).to.equal(1);
    expect(agg.take(windowEndsAt - 1)).to.deep.equal([]);
    const [event, ...more] = agg.take(windowEndsAt);
    expect(more).to.deep.equal([]);
    expect(event).to.deep.equal({
      keyId: KEY,
      class: 'quota',
      status: 429,
      window: 'burst',
      routeClass: 'default',
      node: 'n1',
      first: T0,
      last: T0 + 999,
      count: N,
      firstCorrelationId: 'c0',
      lastCorrelationId: `c${N - 1}`,
    });
    expect(agg.size).to.equal(0);
    expect(agg.dropped).to.equal(0);
  });

  it('keeps first and last right when refusals are recorded out of order', () => {
    const agg = new EventAggregator(10, 60_000);
    for (const at of [T0 + 5, T0 + 2, T0 + 9, T0 + 7]) agg.add(refusal({ at, correlationId: `c${at - T0}` }));
    expect(agg.take(0, true)).to.deep.equal([
      { keyId: KEY, class: 'quota', status: 429, window: 'burst', routeClass: 'default', node: 'n1', first: T0 + 2, last: T0 + 9, count: 4, firstCorrelationId: 'c2', lastCorrelationId: 'c9' },
    ]);
  });

  it('keeps different keys, window names, route classes, classes and windows apart', () => {
    const agg = new EventAggregator(100, 60_000);
    const end = T0 + 1000;
    const variants: Array<Partial<LimitRefusal>> = [{}, { keyId: 'v1:BBBBBBBBBBBBBBBBBBBBBB' }, { window: 'sustained' }, { routeClass: 'payments' }, { class: 'capacity', status: 503, window: '' }];
    for (const v of variants) for (let i = 0; i < 3; i++) agg.add(refusal({ ...v, at: T0 + i, windowEndsAt: end }));
    // The next window of the first key: its refusal opens a new event; the old one is ready at once.
    for (let i = 0; i < 4; i++) agg.add(refusal({ at: end + i, windowEndsAt: end + 1000 }));
    expect(agg.size).to.equal(variants.length + 1);
    const early = agg.take(T0 + 10);
    expect(early.map((e) => [e.first, e.last, e.count])).to.deep.equal([[T0, T0 + 2, 3]]);
    const rest = agg.take(end + 1000);
    expect(rest.map((e) => [e.keyId, e.window, e.routeClass, e.class, e.first, e.count])).to.have.deep.members([
      ['v1:BBBBBBBBBBBBBBBBBBBBBB', 'burst', 'default', 'quota', T0, 3],
      [KEY, 'sustained', 'default', 'quota', T0, 3],
      [KEY, 'burst', 'payments', 'quota', T0, 3],
      [KEY, '', 'default', 'capacity', T0, 3],
      [KEY, 'burst', 'default', 'quota', end, 4],
    ]);
  });

  it('writes an event within flushMs when its window is long or unknown (a 503 has none)', () => {
    const agg = new EventAggregator(100, 5000);
    agg.add(refusal({ at: T0, windowEndsAt: T0 + 3_600_000 }));
    agg.add(refusal({ at: T0 + 1, class: 'fail_closed', status: 503, window: '' }));
    expect(agg.take(T0 + 4999)).to.deep.equal([]);
    expect(agg.take(T0 + 5000).length).to.equal(1);
    expect(agg.take(T0 + 5001).map((e) => e.class)).to.deep.equal(['fail_closed']);
    // A refusal after that, in the same long window, opens the next event of it.
    agg.add(refusal({ at: T0 + 6000, windowEndsAt: T0 + 3_600_000 }));
    expect(agg.take(T0 + 11_000).map((e) => [e.first, e.count])).to.deep.equal([[T0 + 6000, 1]]);
  });

  it('holds at most maxPending events; refusals that would open another are dropped and counted, the held ones still count', () => {
    const agg = new EventAggregator(3, 60_000);
    const key = (i: number): string => `v1:${String(i).padStart(22, 'k')}`;
    for (let i = 0; i < 5; i++) for (let r = 0; r < 10; r++) agg.add(refusal({ keyId: key(i), at: T0 + r }));
    expect(agg.size).to.equal(3);
    expect(agg.dropped).to.equal(20);
    // A window that ended waits in memory, still counted against the cap, until it is taken.
    expect(agg.add(refusal({ keyId: key(0), at: T0 + 60_000 }))).to.equal(false);
    expect(agg.dropped).to.equal(21);
    const taken = agg.take(T0 + 60_000);
    expect(taken.map((e) => [e.keyId, e.count])).to.deep.equal([
      [key(0), 10],
      [key(1), 10],
      [key(2), 10],
    ]);
    expect(agg.add(refusal({ keyId: key(4), at: T0 + 60_001 }))).to.equal(true);
    expect(agg.size).to.equal(1);
  });

  it('uses the running window of the key (its phase offset) for the window end', () => {
    const end = runningWindowEndMs(KEY, T0, 1000);
    expect(end).to.be.within(T0 + 1, T0 + 1000);
    expect(runningWindowEndMs(KEY, end - 1, 1000)).to.equal(end);
    expect(runningWindowEndMs(KEY, end, 1000)).to.equal(end + 1000);
  });
});

describe('limit events: the stored entry and its size bound', () => {
  it('round-trips an event, and reads an entry of the earlier per-refusal shape as a count of one', () => {
    const e = {
      keyId: KEY,
      class: 'quota',
      status: 429,
      window: 'burst',
      routeClass: 'default',
      node: 'n1',
      first: T0,
      last: T0 + 10,
      count: 7,
      firstCorrelationId: 'a',
      lastCorrelationId: 'b',
    } as const;
    expect(decodeEvent(encodeEvent(e))).to.deep.equal(e);
    const legacy = ['at', String(T0), 'keyId', KEY, 'class', 'capacity', 'status', '503', 'window', '', 'routeClass', 'r', 'correlationId', 'x', 'node', 'n'];
    expect(decodeEvent(legacy)).to.deep.equal({
      keyId: KEY,
      class: 'capacity',
      status: 503,
      window: '',
      routeClass: 'r',
      node: 'n',
      first: T0,
      last: T0,
      count: 1,
      firstCorrelationId: 'x',
      lastCorrelationId: 'x',
    });
  });

  it('cuts every field to its cap, so no entry exceeds the bound whatever a route-class function returns', () => {
    const huge = 'é'.repeat(1000) + '😀'.repeat(1000);
    const flat = encodeEvent({
      keyId: KEY,
      class: 'fail_closed',
      status: 503,
      window: huge,
      routeClass: huge,
      node: huge,
      first: T0,
      last: T0,
      count: 1e14,
      firstCorrelationId: huge,
      lastCorrelationId: huge,
    });
    const bytes = flat.reduce((n, s) => n + Buffer.byteLength(s), 0);
    expect(bytes).to.be.at.most(MAX_ENTRY_BYTES - 100);
    expect(flat[flat.indexOf('routeClass') + 1]).to.equal('é'.repeat(32));
    expect(clip('😀😀', 7)).to.equal('😀');
    expect(clip('short', 64)).to.equal('short');
  });

  it('derives the stream length from the byte budget', () => {
    expect(MAX_ENTRY_BYTES, 'the README and ARCHITECTURE state it').to.equal(848);
    expect(maxEntries(EVENT_DEFAULTS.maxBytes)).to.equal(Math.floor((256 * 1024 * 1024) / MAX_ENTRY_BYTES));
    expect(maxEntries(65_536)).to.equal(Math.floor(65_536 / MAX_ENTRY_BYTES));
  });
});

describe('limit events: options', () => {
  it('fills the defaults and refuses a bad option with an error naming the field', () => {
    expect(parseEventOptions(undefined)).to.deep.equal({ maxBytes: 268_435_456, flushMs: 60_000, maxPending: 10_000 });
    const err = (() => {
      try {
        parseEventOptions({ maxBytes: 100, flushMs: 'soon', maxPending: 0, extra: 1 });
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).to.be.instanceOf(ConfigError);
    expect((err as ConfigError).problems.map((p) => p.path).sort()).to.deep.equal(['events.extra', 'events.flushMs', 'events.maxBytes', 'events.maxPending']);
  });

  it('validates redis.events among the limiter options, naming the field', () => {
    const options = {
      policy: demoPolicy(),
      identify: () => undefined,
      keyHash: TEST_KEY_HASH,
      redis: { url: 'redis://127.0.0.1:1', busSecret: { versions: [{ version: 'b1', secret: 'bus-secret-0123456789' }] }, events: { maxBytes: 1024, maxPending: -1 } },
    };
    expect(() => parseOptions(options))
      .to.throw(ConfigError)
      .that.satisfies((e: ConfigError) => {
        const paths = e.problems.map((p) => p.path).sort();
        expect(paths).to.deep.equal(['redis.events.maxBytes', 'redis.events.maxPending']);
        return true;
      });
  });
});
