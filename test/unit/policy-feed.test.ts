import { expect } from 'chai';
import type { SharedRedis } from '../../bus/channels.js';
import { PolicyFeed, type StoredVersion } from '../../bus/policy-feed.js';
import { StoreSigner } from '../../bus/store-signature.js';
import type { CompiledPolicy } from '../../lib/policy.js';
import { demoPolicy } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';

const SIGNER = new StoreSigner([{ version: 'p1', secret: 'policy-feed-secret-0123' }]);

/** A command connection whose reads are held until the test releases them (or fails them, as a quit connection does). */
class HeldRedis {
  private readonly held: Array<(fail?: Error) => void> = [];
  /** The stored policy (HMGET json kid mac) and the kill switch (HGETALL), both signed. */
  private readonly current: [string, string, string];
  private readonly switch: Record<string, string>;

  constructor() {
    const json = JSON.stringify({ version: 1, policy: demoPolicy(), at: 1000, by: 'ops', reason: 'test' });
    const sig = SIGNER.sign('policy', json);
    this.current = [json, sig.kid, sig.mac];
    const sw = { enforce: '0', at: '1000', by: 'ops', reason: 'drill' };
    this.switch = { ...sw, ...SIGNER.sign('switch', JSON.stringify([sw.enforce, sw.at, sw.by, sw.reason])) };
  }

  get pending(): number {
    return this.held.length;
  }
  defineCommand(): void {}
  hmget(): Promise<[string, string, string]> {
    return this.hold(this.current);
  }
  hgetall(): Promise<Record<string, string>> {
    return this.hold(this.switch);
  }
  /** Answers every held read (with `fail`: fails them). */
  release(fail?: Error): void {
    for (const answer of this.held.splice(0)) answer(fail);
  }
  private hold<T>(value: T): Promise<T> {
    return new Promise((resolve, reject) => this.held.push((fail) => (fail ? reject(fail) : resolve(value))));
  }
}

/** A feed over held reads, and what it did to its target. */
function heldFeed() {
  const redis = new HeldRedis();
  const shared = { command: redis, subscribe: () => Promise.resolve() } as unknown as SharedRedis;
  const logs = captureLogger();
  const applied: number[] = [];
  const enforced: boolean[] = [];
  let stored: StoredVersion | undefined;
  const target = {
    inForce: () => stored,
    apply: (p: CompiledPolicy, v: StoredVersion) => {
      applied.push(p.version);
      stored = v;
    },
    enforce: (on: boolean) => void enforced.push(on),
  };
  const feed = new PolicyFeed(shared, 'pf', SIGNER, target, logs.logger, 60_000);
  return { redis, feed, applied, enforced, logs };
}

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('policy feed: applying the stored policy and kill switch, and closing', () => {
  it('applies what its start load read (the held reads stand for a real store)', async () => {
    const { redis, feed, applied, enforced } = heldFeed();
    expect(redis.pending).to.equal(2);
    redis.release();
    await turn();
    expect(applied).to.deep.equal([1]);
    expect(enforced).to.deep.equal([false]);
    await feed.close();
  });

  it('close waits for the load in flight, and what that load read after close is not applied', async () => {
    const { redis, feed, applied, enforced, logs } = heldFeed();
    expect(redis.pending).to.equal(2);
    let closed = false;
    const closing = feed.close().then(() => (closed = true));
    await turn();
    expect(closed, 'close resolved while a load was in flight').to.equal(false);
    redis.release();
    await closing;
    await turn();
    expect(redis.pending).to.equal(0);
    expect(applied, 'a policy applied after close').to.deep.equal([]);
    expect(enforced, 'the kill switch set after close').to.deep.equal([]);
    expect(logs.lines).to.deep.equal([]);
  });

  it('a load failing after close (its connection quit) counts and logs nothing; close does not reject', async () => {
    const { redis, feed, logs } = heldFeed();
    const closing = feed.close();
    redis.release(new Error('Connection is closed.'));
    await closing;
    await turn();
    expect(feed.failures).to.equal(0);
    expect(logs.lines).to.deep.equal([]);
  });

  it('after close a load reads nothing, and close with no load in flight resolves at once', async () => {
    const { redis, feed, applied } = heldFeed();
    redis.release();
    await turn();
    await feed.close();
    await feed.load();
    expect(redis.pending).to.equal(0);
    expect(applied).to.deep.equal([1]);
  });
});
