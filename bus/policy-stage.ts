import { randomBytes } from 'node:crypto';
import { ErrorCode, RateLimiterError } from '../lib/errors.js';
import { judgeCandidate, type StageReport } from '../lib/policy-backfill.js';
import { compilePolicy, type CompiledPolicy, type PolicyDoc } from '../lib/policy.js';
import { PolicyConflict, type PolicyStore } from './policy-store.js';
import { StoreRecordError } from './store-signature.js';
import { readHistory } from './traffic-history.js';

/** A candidate policy, judged against the recorded traffic and kept for review until activated. */
export interface StagedPolicy {
  readonly id: string;
  /** The version in force when it was staged (0: none); it activates only over that very version. */
  readonly baseVersion: number;
  /** The candidate, with the version it would be stored as (`baseVersion + 1`). */
  readonly policy: PolicyDoc;
  readonly at: number;
  readonly by: string;
  readonly reason: string;
  readonly report: StageReport;
}

/** The staged candidate names a version that is no longer in force: stage it again. */
export class StaleStage extends RateLimiterError {
  constructor(
    readonly staged: StagedPolicy,
    readonly current: number,
  ) {
    super(
      ErrorCode.CONFLICT,
      `stage ${staged.id} was staged over version ${staged.baseVersion}, and version ${current} is in force now; stage the candidate again to judge it over the policy in force`,
    );
  }
}

/** No staged candidate of that id. */
export class NoSuchStage extends RateLimiterError {
  constructor(readonly id: string) {
    super(ErrorCode.REQUEST, `no staged policy "${id}"`);
  }
}

/** The smallest limit of any window the candidate enforces: counts at or below it cannot be throttled. */
function smallestLimit(p: CompiledPolicy): number {
  let least = Number.POSITIVE_INFINITY;
  for (const plan of Object.values(p.doc.plans)) if (plan.mode !== 'shadow') for (const w of plan.windows) least = Math.min(least, w.limit);
  for (const k of Object.values(p.doc.keys ?? {})) for (const w of k.windows ?? []) least = Math.min(least, w.limit);
  return Number.isFinite(least) ? least : 0;
}

/**
 * Policy staging: `stage` judges a candidate against the traffic history (`judgeCandidate`) and keeps
 * it, signed like the stored policy, in `<prefix>:{pol}:staged` (hash: id → `{json, kid, mac}`);
 * `activate` verifies a staged candidate and stores it as the next version only over the version it
 * was staged on (the policy-put script's check: no race). Both are audited.
 */
export class PolicyStaging {
  constructor(private readonly store: PolicyStore) {}

  private get key(): string {
    return `${this.store.prefix}:{pol}:staged`;
  }

  /** Judges `candidate` over the last `hours` hours of history and stores it for review. */
  async stage(candidate: Omit<PolicyDoc, 'version'>, by: string, reason: string, hours: number, now = Date.now()): Promise<StagedPolicy> {
    const current = await this.store.current();
    const baseVersion = current?.version ?? 0;
    const policy = { ...candidate, version: baseVersion + 1 } as PolicyDoc;
    const compiled = compilePolicy(policy);
    const before = current === undefined ? undefined : compilePolicy(current.policy);
    const history = await readHistory(this.store.redis, this.store.prefix, now, hours, smallestLimit(compiled));
    const report = judgeCandidate(before, compiled, history);
    const staged: StagedPolicy = { id: randomBytes(9).toString('base64url'), baseVersion, policy, at: now, by, reason, report };
    const json = JSON.stringify(staged);
    await this.store.redis.hset(this.key, staged.id, JSON.stringify({ json, ...this.store.signer.sign('stage', json) }));
    await this.store.audit(
      by,
      'policy.stage',
      `stage:${staged.id}`,
      reason,
      `over version ${baseVersion}: ${report.newlyThrottled.count} newly throttled, ${report.furtherThrottled.count} further throttled, ${report.unjudged.count} unjudged (key, window) over ${report.hoursWithData} of ${hours} hours`,
    );
    return staged;
  }

  /** A staged candidate, verified; `NoSuchStage` or a `StoreRecordError` when there is none or it does not verify. */
  async get(id: string): Promise<StagedPolicy> {
    const raw = await this.store.redis.hget(this.key, id);
    if (raw === null) throw new NoSuchStage(id);
    let rec: { json?: unknown; kid?: unknown; mac?: unknown };
    try {
      rec = JSON.parse(raw) as typeof rec;
    } catch {
      throw new StoreRecordError('malformed', `stage ${id}: is not JSON`);
    }
    if (typeof rec !== 'object' || rec === null) throw new StoreRecordError('malformed', `stage ${id}: is not a signed record`);
    this.store.signer.verify('stage', String(rec.json), rec.kid, rec.mac);
    const staged = JSON.parse(String(rec.json)) as StagedPolicy;
    if (staged.id !== id || !Number.isSafeInteger(staged.baseVersion) || staged.policy?.version !== staged.baseVersion + 1) {
      throw new StoreRecordError('malformed', `stage ${id}: must name its own id and the version it was staged over`);
    }
    return staged;
  }

  /**
   * Stores a staged candidate as the policy in force (version `baseVersion + 1`), audited and announced
   * to every node. Refused with `StaleStage` unless `baseVersion` is still in force, and with a
   * `StoreRecordError` unless the stage verifies.
   */
  async activate(id: string, by: string, reason: string): Promise<StagedPolicy> {
    const staged = await this.get(id);
    const current = await this.store.current();
    if ((current?.version ?? 0) !== staged.baseVersion) throw new StaleStage(staged, current?.version ?? 0);
    compilePolicy(staged.policy);
    const version = staged.policy.version;
    const r = staged.report;
    try {
      await this.store.put(
        current === undefined ? '0' : String(current.version),
        { version, policy: staged.policy, at: Date.now(), by, reason },
        'policy.activate',
        'policy',
        `version ${version} from stage ${id} (${r.newlyThrottled.count} newly throttled, ${r.unjudged.count} unjudged when staged)`,
      );
    } catch (err) {
      if (err instanceof PolicyConflict) throw new StaleStage(staged, err.current);
      throw err;
    }
    return staged;
  }
}
