import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';
import { compilePolicy, type CompiledPolicy, type PolicyDoc } from '../lib/policy.js';

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
export class PolicyConflict extends Error {
  constructor(readonly current: number) {
    super(`the policy changed meanwhile (now version ${current}); read it again and retry`);
    this.name = 'PolicyConflict';
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
 * `frl:{pol}:current` (hash: version, json), `frl:{pol}:versions` (hash), `frl:{pol}:audit` (stream),
 * `frl:{pol}:switch` (hash); channel `frl:policy`. Only a document `compilePolicy` accepts is stored.
 */
export class PolicyStore {
  private readonly prefix: string;

  constructor(
    private readonly redis: Client,
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

  /** The policy in force, or undefined if none was ever stored. */
  async current(): Promise<StoredPolicy | undefined> {
    const json = await this.redis.hget(this.key('current'), 'json');
    return json === null ? undefined : (JSON.parse(json) as StoredPolicy);
  }

  /** The current policy compiled (what a node applies); throws a `PolicyError` if it does not compile. */
  async compiled(): Promise<CompiledPolicy | undefined> {
    const stored = await this.current();
    return stored === undefined ? undefined : compilePolicy(stored.policy);
  }

  /**
   * Stores `change(current)` as the next version, if it compiles (else the `PolicyError` is thrown and
   * nothing changes), and audits it. A change to the same document stores and audits nothing (and
   * returns the current version). Throws `PolicyConflict` if another version landed meanwhile.
   */
  async update(change: (current: PolicyDoc | undefined) => Omit<PolicyDoc, 'version'>, by: string, reason: string, action: string, target: string, detail = ''): Promise<StoredPolicy> {
    const before = await this.current();
    const version = (before?.version ?? 0) + 1;
    const policy = { ...change(before?.policy), version } as PolicyDoc;
    compilePolicy(policy);
    if (before !== undefined && JSON.stringify({ ...before.policy, version }) === JSON.stringify(policy)) return before;
    const stored: StoredPolicy = { version, policy, at: Date.now(), by, reason };
    try {
      await (this.redis as unknown as PutCommand).frlPolicyPut(
        this.key('current'),
        this.key('versions'),
        this.key('audit'),
        String(before?.version ?? 0),
        String(version),
        JSON.stringify(stored),
        this.channel,
        ...auditFields(by, action, target, reason, detail || `version ${version}`),
      );
    } catch (err) {
      const m = /CONFLICT (\d+)/.exec(String((err as Error).message));
      if (m) throw new PolicyConflict(Number(m[1]));
      throw err;
    }
    return stored;
  }

  /** Whether limits are enforced (true unless the kill switch turned them off). */
  async switchState(): Promise<SwitchState> {
    const h = await this.redis.hgetall(this.key('switch'));
    return { enforce: h.enforce !== '0', at: Number(h.at ?? 0), by: h.by ?? '', reason: h.reason ?? '' };
  }

  /**
   * Turns enforcement off fleet-wide or back on: set, audited and announced in one script; setting it
   * to what it already is writes nothing. Returns the state in force.
   */
  async setSwitch(enforce: boolean, by: string, reason: string): Promise<SwitchState> {
    const at = Date.now();
    const changed = await (this.redis as unknown as PutCommand).frlSwitchPut(
      this.key('switch'),
      this.key('audit'),
      enforce ? '1' : '0',
      String(at),
      by,
      reason,
      this.channel,
      ...auditFields(by, 'kill-switch', 'enforcement', reason, enforce ? 'enforcement on' : 'enforcement off'),
    );
    return changed === 1 ? { enforce, at, by, reason } : this.switchState();
  }

  /** Appends an audit entry for a change made elsewhere (a job run, an erasure). */
  async audit(by: string, action: string, target: string, reason: string, detail = ''): Promise<void> {
    await this.redis.xadd(this.key('audit'), '*', ...auditFields(by, action, target, reason, detail));
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

function auditFields(principal: string, action: string, target: string, reason: string, detail: string): string[] {
  return ['at', String(Date.now()), 'principal', principal, 'action', action, 'target', target, 'reason', reason, 'detail', detail];
}
