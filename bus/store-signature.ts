import { sameMac, secretKeys, type BusSecretVersion } from './codec.js';
import { ErrorCode, RateLimiterError } from '../lib/errors.js';
import type { HmacSha256 } from '../lib/hmac-sha256.js';

/**
 * What the policy store signs: the policy document (overrides are part of it), the kill switch, and a
 * staged candidate policy (activated only if it verifies).
 */
export type SignedKind = 'policy' | 'switch' | 'stage';

/** Why a stored record was refused; counted per reason. */
export type StoreRejectReason = 'unsigned' | 'secret' | 'mac' | 'malformed' | 'replay';

/** A stored record a node must not apply: `reason` for counting, `message` names the field. */
export class StoreRecordError extends RateLimiterError {
  constructor(
    readonly reason: StoreRejectReason,
    message: string,
  ) {
    super(ErrorCode.REFUSED, message);
  }
}

/**
 * Signs and checks the records of the policy store that change enforcement, so that whoever can
 * write to Redis without the policy secret changes no limit and no switch (the bus's threat, B3,
 * applied to the store). HMAC-SHA-256 over `frl-store`, the kind and the payload (bus MACs start
 * with a schema version, so the two never verify each other's), under a versioned secret: records
 * say which version signed them, and every retained version verifies, so the secret rotates like the
 * bus's.
 */
export class StoreSigner {
  private readonly keys: ReadonlyMap<string, HmacSha256>;
  readonly current: string;

  constructor(versions: readonly BusSecretVersion[], current?: string) {
    ({ keys: this.keys, current: this.current } = secretKeys(versions, current, 'policySecret'));
  }

  sign(kind: SignedKind, payload: string): { kid: string; mac: string } {
    return { kid: this.current, mac: this.mac(this.keys.get(this.current)!, kind, payload) };
  }

  /** Throws a `StoreRecordError` unless `mac` is `payload`'s under secret version `kid`. */
  verify(kind: SignedKind, payload: string, kid: unknown, mac: unknown): void {
    if (kid === undefined && mac === undefined) throw new StoreRecordError('unsigned', `${kind}: not signed (no kid, no mac)`);
    const key = typeof kid === 'string' ? this.keys.get(kid) : undefined;
    if (key === undefined) throw new StoreRecordError('secret', `${kind}.kid: unknown policy secret version ${JSON.stringify(kid)}`);
    if (!sameMac(this.mac(key, kind, payload), mac)) throw new StoreRecordError('mac', `${kind}.mac: does not match (forged, or signed with another secret)`);
  }

  private mac(key: HmacSha256, kind: SignedKind, payload: string): string {
    return key.macBase64url(`frl-store\n${kind}\n${payload}`);
  }
}
