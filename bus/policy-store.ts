import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';
import { compilePolicy, type PolicyDoc } from '../lib/policy.js';
import { StoreRecordError, type StoreSigner } from './store-signature.js';
import { ErrorCode, RateLimiterError } from '../lib/errors.js';

const PUT_SCRIPT = readFileSync(new URL('./lua/policy-put.lua', import.meta.url), 'utf8');
const SWITCH_SCRIPT = readFileSync(new URL('./lua/switch-put.lua', import.meta.url), 'utf8');

/** One stored policy version. */
export interface StoredPolicy {
  readonly version: number;
  readonly policy: PolicyDoc;
  /** Wall-clock ms it was stored. */
  readonly at: number;
  /** Who stored it (the admin credential's name), and why. */
  readonly by: string;
  readonly reason: string;
}

/** One audit entry: who changed what, when, why. Never a raw key. */
export interface AuditEntry {
  readonly id: string;
  readonly at: number;
  readonly principal: string;
  readonly action: string;
  readonly target: string;
  readonly reason: string;
  readonly detail: string;
}

/** Whether limits are enforced fleet-wide (the break-glass kill switch), with who set it and why. */
export interface SwitchState {
  readonly enforce: boolean;
  readonly at: number;
  readonly by: string;
  readonly reason: string;
}

/** Someone stored another version between this writer's read and its write; read and retry. */
export class PolicyConflict extends RateLimiterError {
  constructor(readonly current: number) {
    super(ErrorCode.CONFLICT, `the policy changed meanwhile (now version ${current}); read it again and retry`);
  }
}

type Client = Redis | Cluster;

interface PutCommand {
  frlPolicyPut(...args: string[]): Promise<number>;
  frlSwitchPut(...args: string[]): Promise<number>;
}

/**
 * Live policies in Redis (P4): versioned, each version kept, every change audited, announced on a
 * channel every node listens to. Keys share the hash tag `{pol}` (one Redis Cluster slot):
 * `frl:{pol}:current` (hash: version, json, kid, mac), `frl:{pol}:versions` (hash: version → the
 * signed record as JSON), `frl:{pol}:audit` (stream), `frl:{pol}:switch` (hash: enforce, at, by,
 * reason, kid, mac); channel `frl:policy`. Only a document `compilePolicy` accepts is stored. The
 * policy and the switch are signed (`StoreSigner`): a record that does not verify is refused with a
 * `StoreRecordError`, and changes nothing.
 */
export class PolicyStore {
  readonly prefix: string;

  constructor(
    readonly redis: Client,
    readonly signer: StoreSigner,
    prefix = 'frl',
  ) {
    this.prefix = prefix;
    redis.defineCommand('frlPolicyPut', { numberOfKeys: 3, lua: PUT_SCRIPT });
    redis.defineCommand('frlSwitchPut', { numberOfKeys: 2, lua: SWITCH_SCRIPT });
  }

  /** Channel announcing a new policy version (message: the version) or a switch change (`switch`). */
  get channel(): string {
    return `${this.prefix}:policy`;
  }

  private key(name: string): string {
    return `${this.prefix}:{pol}:${name}`;
  }

  /**
   * The policy in force, or undefined if none was ever stored. Throws a `StoreRecordError` if the
   * stored record is not one signed under the policy secret, or is malformed.
   */
  async current(): Promise<StoredPolicy | undefined> {
    const [json, kid, mac] = await this.redis.hmget(this.key('current'), 'json', 'kid', 'mac');
    return json === null || json === undefined ? undefined : this.open(json, kid, mac);
  }

  /**
   * Stores `change(current)` as the next version, if it compiles (else the `PolicyError` is thrown and
   * nothing changes), and audits it. A change to the same document stores and audits nothing (and
   * returns the current version). Throws `PolicyConflict` if another version landed meanwhile. Over a
   * current record that does not verify (written by someone without the secret), it builds on the
   * newest version of the history that does, overwrites the record and says so in the audit entry.
   */
  async update(change: (current: PolicyDoc | undefined) => Omit<PolicyDoc, 'version'>, by: string, reason: string, action: string, target: string, detail = ''): Promise<StoredPolicy> {
    const [raw, json, kid, mac] = await this.redis.hmget(this.key('current'), 'version', 'json', 'kid', 'mac');
    let before: StoredPolicy | undefined;
    let refused: StoreRecordError | undefined;
    try {
      before = json === null || json === undefined ? undefined : this.open(json, kid, mac);
    } catch (err) {
      if (!(err instanceof StoreRecordError)) throw err;
      refused = err;
      before = await this.newestVerified();
    }
    const version = (before?.version ?? 0) + 1;
    const policy = { ...change(before?.policy), version } as PolicyDoc;
    compilePolicy(policy);
    if (refused === undefined && before !== undefined && JSON.stringify({ ...before.policy, version }) === JSON.stringify(policy)) return before;
    const stored: StoredPolicy = { version, policy, at: Date.now(), by, reason };
    const note = refused === undefined ? '' : ` over a refused current record (${refused.reason})`;
    await this.put(raw ?? '0', stored, action, target, (detail || `version ${version}`) + note);
    return stored;
  }

  /**
   * Signs `stored` and puts it as the policy in force, audited and announced, only if the current
   * record's version field is still `expected` (`'0'`: none); else throws `PolicyConflict`.
   */
  async put(expected: string, stored: StoredPolicy, action: string, target: string, detail: string): Promise<void> {
    const body = JSON.stringify(stored);
    const sig = this.signer.sign('policy', body);
    try {
      await (this.redis as unknown as PutCommand).frlPolicyPut(
        this.key('current'),
        this.key('versions'),
        this.key('audit'),
        expected,
        String(stored.version),
        body,
        sig.kid,
        sig.mac,
        JSON.stringify({ json: body, ...sig }),
        this.channel,
        ...auditFields(stored.by, action, target, stored.reason, detail),
      );
    } catch (err) {
      const m = /CONFLICT (\S+)/.exec(String((err as Error).message));
      if (m) throw new PolicyConflict(Number(m[1]));
      throw err;
    }
  }

  /**
   * Whether limits are enforced (true unless the kill switch turned them off; true when it was never
   * set). Throws a `StoreRecordError` if the stored switch is not signed under the policy secret.
   */
  async switchState(): Promise<SwitchState> {
    const h = await this.redis.hgetall(this.key('switch'));
    if (Object.keys(h).length === 0) return { enforce: true, at: 0, by: '', reason: '' };
    this.signer.verify('switch', switchPayload(h.enforce, h.at, h.by, h.reason), h.kid, h.mac);
    const at = Number(h.at);
    if ((h.enforce !== '0' && h.enforce !== '1') || !Number.isSafeInteger(at)) throw new StoreRecordError('malformed', 'switch: enforce must be 0 or 1 and at a time in ms');
    return { enforce: h.enforce === '1', at, by: h.by ?? '', reason: h.reason ?? '' };
  }

  /**
   * Turns enforcement off fleet-wide or back on: set, signed, audited and announced in one script;
   * setting it to what it already is writes nothing (unless the stored switch does not verify: then
   * it is overwritten). Returns the state in force.
   */
  async setSwitch(enforce: boolean, by: string, reason: string): Promise<SwitchState> {
    const at = Date.now();
    const on = enforce ? '1' : '0';
    const trusted = await this.switchState().then(
      () => true,
      (err: unknown) => {
        if (err instanceof StoreRecordError) return false;
        throw err;
      },
    );
    const sig = this.signer.sign('switch', switchPayload(on, String(at), by, reason));
    const changed = await (this.redis as unknown as PutCommand).frlSwitchPut(
      this.key('switch'),
      this.key('audit'),
      on,
      String(at),
      by,
      reason,
      sig.kid,
      sig.mac,
      trusted ? '0' : '1',
      this.channel,
      ...auditFields(by, 'kill-switch', 'enforcement', reason, (enforce ? 'enforcement on' : 'enforcement off') + (trusted ? '' : ' (over a refused switch record)')),
    );
    return changed === 1 ? { enforce, at, by, reason } : this.switchState();
  }

  /** Verifies and parses a stored policy record. */
  private open(json: string, kid: string | null | undefined, mac: string | null | undefined): StoredPolicy {
    this.signer.verify('policy', json, kid ?? undefined, mac ?? undefined);
    let x: Partial<StoredPolicy> | null;
    try {
      x = JSON.parse(json) as Partial<StoredPolicy> | null;
    } catch {
      throw new StoreRecordError('malformed', 'policy.json: is not JSON');
    }
    if (
      typeof x !== 'object' ||
      x === null ||
      !Number.isSafeInteger(x.version) ||
      x.version! < 1 ||
      typeof x.policy !== 'object' ||
      x.policy === null ||
      x.policy.version !== x.version ||
      !Number.isSafeInteger(x.at)
    ) {
      throw new StoreRecordError('malformed', 'policy.json: must hold a version ≥ 1, the policy of that version and at (ms)');
    }
    return x as StoredPolicy;
  }

  /** The newest version of the history that verifies, if any. */
  private async newestVerified(): Promise<StoredPolicy | undefined> {
    let newest: StoredPolicy | undefined;
    for (const raw of Object.values(await this.redis.hgetall(this.key('versions')))) {
      try {
        const r = JSON.parse(raw) as { json?: string; kid?: string; mac?: string };
        const p = this.open(String(r.json), r.kid, r.mac);
        if (newest === undefined || p.version > newest.version) newest = p;
      } catch {
        // Not one this store signed: skipped.
      }
    }
    return newest;
  }

  /** Appends an audit entry for a change made elsewhere (a job run, an erasure). */
  audit(by: string, action: string, target: string, reason: string, detail = ''): Promise<void> {
    return appendAudit(this.redis, this.prefix, by, action, target, reason, detail);
  }

  /** The newest audit entries first. */
  async auditLog(limit: number): Promise<AuditEntry[]> {
    const rows = await this.redis.xrevrange(this.key('audit'), '+', '-', 'COUNT', limit);
    return rows.map(([id, flat]) => {
      const f: Record<string, string> = {};
      for (let i = 0; i + 1 < flat.length; i += 2) f[flat[i]!] = flat[i + 1]!;
      return { id, at: Number(f.at ?? id.split('-')[0]), principal: f.principal ?? '', action: f.action ?? '', target: f.target ?? '', reason: f.reason ?? '', detail: f.detail ?? '' };
    });
  }
}

/** Who can append audit entries: a policy store, or a writer with no policy secret (the maintenance worker). */
export type AuditWriter = Pick<PolicyStore, 'audit'>;

/** Appends an audit entry to `prefix`'s audit stream (no secret needed: the audit trail is not signed). */
export async function appendAudit(redis: Client, prefix: string, by: string, action: string, target: string, reason: string, detail = ''): Promise<void> {
  await redis.xadd(`${prefix}:{pol}:audit`, '*', ...auditFields(by, action, target, reason, detail));
}

/** What the switch's MAC covers: its four fields, as JSON (no separator inside a field can shift them). */
function switchPayload(enforce: string | undefined, at: string | undefined, by: string | undefined, reason: string | undefined): string {
  return JSON.stringify([enforce ?? '', at ?? '', by ?? '', reason ?? '']);
}

function auditFields(principal: string, action: string, target: string, reason: string, detail: string): string[] {
  return ['at', String(Date.now()), 'principal', principal, 'action', action, 'target', target, 'reason', reason, 'detail', detail];
}
