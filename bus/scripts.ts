import { readFileSync } from 'node:fs';
import type { EnvelopeFields } from './codec.js';
import type { KeySchema } from './keys.js';
import type { RedisClient } from './redis-connection.js';

/**
 * The Redis bus's Lua scripts (`bus/lua/`), defined as commands on its connections, one typed
 * function each (its KEYS built here, its ARGV named), and the shape of stream entries as Redis
 * returns them. The callers never cast a script's reply.
 */

const ROUND_SCRIPT = readFileSync(new URL('./lua/round.lua', import.meta.url), 'utf8');
const SNAPSHOT_SCRIPT = readFileSync(new URL('./lua/snapshot.lua', import.meta.url), 'utf8');
const FENCE_SCRIPT = readFileSync(new URL('./lua/fence.lua', import.meta.url), 'utf8');
const APPEND_GRANTS_SCRIPT = readFileSync(new URL('./lua/append-grants.lua', import.meta.url), 'utf8');

/** Stream entries as XRANGE, XREADGROUP and XAUTOCLAIM return them (a trimmed pending one has null fields). */
export type StreamEntries = Array<[string, string[]]>;

/** What `lua/round.lua` returns. */
export type RoundReply = [now: string, members: string[], owners: string[], blind: string[], left: string[], held: string[]];

/** What `lua/fence.lua` returns: raised (the seal it replaced, the log if asked), or the fence that stands. */
export type FenceReply = [1, string, StreamEntries] | [0, string, string, string];

/** The scripts as commands of a connection they were defined on. */
interface ScriptCommands {
  frlRound(...args: string[]): Promise<RoundReply>;
  frlSnapshot(...args: string[]): Promise<string | null>;
  frlFence(...args: string[]): Promise<FenceReply>;
  frlAppendGrants(...args: string[]): Promise<string | null>;
}

/** Defines the round, snapshot and fence scripts: the command connection's. */
export function defineControlScripts(c: RedisClient): void {
  c.defineCommand('frlRound', { numberOfKeys: 5, lua: ROUND_SCRIPT });
  c.defineCommand('frlSnapshot', { numberOfKeys: 3, lua: SNAPSHOT_SCRIPT });
  c.defineCommand('frlFence', { numberOfKeys: 2, lua: FENCE_SCRIPT });
}

/** Defines the grant append, on each connection grants are logged on. */
export function defineGrantScript(c: RedisClient): void {
  c.defineCommand('frlAppendGrants', { numberOfKeys: 2, lua: APPEND_GRANTS_SCRIPT });
}

/** A connection's script commands (looked up at each call, so a command replaced on it is the one run). */
function commands(c: RedisClient): ScriptCommands {
  return c as unknown as ScriptCommands;
}

/** ARGV of `lua/round.lua`. */
export interface RoundArgs {
  readonly nodeId: string;
  readonly nodeEpoch: string;
  /** How long a claimed or renewed lease lasts, ms. */
  readonly leaseMs: number;
  /** How long a member stays listed without a round, ms. */
  readonly memberExpiryMs: number;
  readonly wanted: readonly number[];
  readonly released: readonly number[];
  /** `leave`: the node drops out of the member list (a clean shutdown). */
  readonly membership: 'stay' | 'leave';
  /** The highest owner epoch this node has seen on any shard. */
  readonly highestEpoch: number;
  /** This node's sealed heartbeat statement (its leave statement when it leaves). */
  readonly statement: string;
}

/** `lua/round.lua`: one control round of this node, atomic; returns the fleet and the ownership table. */
export function roundScript(c: RedisClient, keys: KeySchema, a: RoundArgs): Promise<RoundReply> {
  return commands(c).frlRound(
    keys.ctl('members'),
    keys.ctl('epochs'),
    keys.ctl('owners'),
    keys.ctl('left'),
    keys.ctl('beats'),
    a.nodeId,
    a.nodeEpoch,
    String(a.leaseMs),
    String(a.memberExpiryMs),
    a.wanted.join(','),
    a.released.join(','),
    a.membership === 'leave' ? '1' : '0',
    String(a.highestEpoch),
    a.statement,
  );
}

/** ARGV of `lua/snapshot.lua`. */
export interface SnapshotArgs {
  /** The writer's owner epoch, and its process (`processName`). */
  readonly epoch: number;
  readonly process: string;
  /** Keep this many ms of the streams behind the checkpoint. */
  readonly keepMs: number;
  /** Id of the last report entry the writer has read (`ms-seq`; `0-0` for none). */
  readonly lastRead: string;
  readonly fields: EnvelopeFields;
}

/** `lua/snapshot.lua`: a shard's checkpoint and the trim behind it, fenced; its id, or null if refused. */
export function snapshotScript(c: RedisClient, keys: KeySchema, shard: number, a: SnapshotArgs): Promise<string | null> {
  return commands(c).frlSnapshot(
    keys.shard(shard, 'log'),
    keys.shard(shard, 'reports'),
    keys.shard(shard, 'fence'),
    String(a.epoch),
    a.process,
    String(a.keepMs),
    a.lastRead.split('-')[0]!,
    ...flatFields(a.fields),
  );
}

/** ARGV of `lua/fence.lua`. */
export interface FenceArgs {
  /** The claimant's owner epoch, its process (`processName`) and its sealed `fence` envelope. */
  readonly epoch: number;
  readonly holder: string;
  readonly seal: string;
  /** The seal of a fence to replace whatever its epoch ('' for none). */
  readonly found: string;
  /** `log`: read the log in the same step as the fence goes up. */
  readonly read: 'log' | 'nothing';
}

/** `lua/fence.lua`: raises the fence of a shard's log, or says which fence stands. */
export function fenceScript(c: RedisClient, keys: KeySchema, shard: number, a: FenceArgs): Promise<FenceReply> {
  return commands(c).frlFence(keys.shard(shard, 'fence'), keys.shard(shard, 'log'), String(a.epoch), a.holder, a.seal, a.found, a.read === 'log' ? '1' : '0');
}

/** ARGV of `lua/append-grants.lua`. */
export interface AppendGrantsArgs {
  /** The writer's owner epoch and its process (`processName`). */
  readonly epoch: number;
  readonly process: string;
  /** The log's approximate length cap. */
  readonly maxLength: string;
  readonly fields: EnvelopeFields;
}

/** `lua/append-grants.lua`: grants onto a shard's log unless it is fenced; the entry's id, or null if refused. */
export function appendGrantsScript(c: RedisClient, keys: KeySchema, shard: number, a: AppendGrantsArgs): Promise<string | null> {
  return commands(c).frlAppendGrants(keys.shard(shard, 'log'), keys.shard(shard, 'fence'), String(a.epoch), a.process, a.maxLength, ...flatFields(a.fields));
}

/** An envelope as the fields of a stream entry. */
export function flatFields(f: EnvelopeFields): string[] {
  return ['v', f.v, 'kid', f.kid, 't', f.t, 'b', f.b, 'mac', f.mac];
}

/** Whether stream entry id `a` (`ms-seq`) comes before `b`. */
export function streamIdBelow(a: string, b: string): boolean {
  const [am = 0, as = 0] = a.split('-').map(Number);
  const [bm = 0, bs = 0] = b.split('-').map(Number);
  return am < bm || (am === bm && as < bs);
}
