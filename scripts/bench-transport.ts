import { fork } from 'node:child_process';
import { createServer, connect, type AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { quantile } from '../lib/quantile.js';
import { startBurners } from './burners.js';
import { startRedis } from './redis-server.js';

/**
 * `npm run bench:transport [-- --samples 2000 --burners 0 --pause-ms 2 --redis URL]`: the floor under
 * the fast path — what an ask's round trip costs on this machine with no limiter work in either
 * process. An "asker" and an "owner" process exchange 300-byte messages, one at a time with a pause
 * between (2 ms: both idle when a message arrives; 100 ms: both asleep, as at a quiet gateway, where
 * waking each process costs more), the owner logging each with an
 * XADD before it answers, as the real owner does. Three ways, interleaved so each sees the same
 * machine: both ways over Redis pub/sub (the fallback), both ways over TCP with the XADD awaited
 * (the direct channel), and the owner's XADD alone. Compare with `npm run bench:bus`, which adds
 * the protocol's own work.
 */

const USAGE = 'usage: npm run bench:transport -- [--samples 2000] [--burners 0] [--pause-ms 2] [--redis redis://host:port]';
const PAYLOAD = 'x'.repeat(300);
const WAYS = ['redis pub/sub both ways', 'TCP, XADD awaited (direct channel)', 'XADD alone (owner → Redis → owner)'] as const;

/** The owner: answers pub/sub asks by XADD + PUBLISH pipelined, TCP asks by XADD then write. */
async function owner(url: string): Promise<void> {
  const sub = new Redis(url);
  const cmd = new Redis(url);
  const log = (m: string): Promise<unknown> => cmd.call('XADD', 'bench:transport:log', 'MAXLEN', '~', '1000', '*', 'b', m);
  await sub.subscribe('bench:transport:owner');
  sub.on('message', (_c: string, m: string) => {
    void log(m);
    void cmd.publish('bench:transport:asker', m);
  });
  const server = createServer((s) => {
    s.setNoDelay(true);
    s.setEncoding('utf8');
    s.on('data', (m: string) => void log(m).then(() => s.write(m)));
  });
  server.listen(0, '127.0.0.1', () => process.send!((server.address() as AddressInfo).port));
}

function stats(v: number[]): string {
  const s = [...v].sort((a, b) => a - b);
  return [0.5, 0.9, 0.99].map((q) => quantile(s, q).toFixed(3)).join(' / ');
}

async function main(): Promise<void> {
  let v;
  try {
    v = parseArgs({ options: { samples: { type: 'string' }, burners: { type: 'string' }, 'pause-ms': { type: 'string' }, redis: { type: 'string' }, owner: { type: 'string' } }, strict: true }).values;
  } catch (err) {
    process.stderr.write(`bench:transport: ${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  if (v.owner !== undefined) return owner(v.owner);
  const samples = Number(v.samples ?? 2000);
  const burners = Number(v.burners ?? 0);
  if (!Number.isInteger(samples) || samples < 100 || samples > 100_000) throw new Error(`--samples must be an integer from 100 to 100000, got "${v.samples}"`);
  if (!Number.isInteger(burners) || burners < 0 || burners > 16) throw new Error(`--burners must be an integer from 0 to 16, got "${v.burners}"`);
  const pause = Number(v['pause-ms'] ?? 2);
  if (!Number.isInteger(pause) || pause < 1 || pause > 1000) throw new Error(`--pause-ms must be an integer from 1 to 1000, got "${v['pause-ms']}"`);
  const own = v.redis === undefined ? await startRedis() : undefined;
  const url = v.redis ?? own!.url;
  const child = fork(fileURLToPath(import.meta.url), ['--owner', url], { stdio: 'inherit' });
  const port = await new Promise<number>((r) => child.once('message', (m) => r(m as number)));
  // Long enough for any run: a sample is three round trips and three pauses.
  const burning = startBurners(burners, 60_000 + (20 + 3 * pause) * samples);
  const sub = new Redis(url);
  const cmd = new Redis(url);
  await sub.subscribe('bench:transport:asker');
  const socket = connect(port, '127.0.0.1');
  socket.setNoDelay(true);
  await new Promise((r) => socket.once('connect', r));
  let answered: () => void = () => undefined;
  sub.on('message', () => answered());
  socket.on('data', () => answered());
  const rtt: number[][] = WAYS.map(() => []);
  const once = (send: () => unknown): Promise<number> =>
    new Promise((resolve) => {
      const start = performance.now();
      answered = () => resolve(performance.now() - start);
      send();
    });
  for (let i = 0; i < samples; i++) {
    rtt[0]!.push(await once(() => cmd.publish('bench:transport:owner', PAYLOAD)));
    await new Promise((r) => setTimeout(r, pause));
    rtt[1]!.push(await once(() => socket.write(PAYLOAD)));
    await new Promise((r) => setTimeout(r, pause));
    const start = performance.now();
    await cmd.call('XADD', 'bench:transport:log', 'MAXLEN', '~', '1000', '*', 'b', PAYLOAD);
    rtt[2]!.push(performance.now() - start);
    await new Promise((r) => setTimeout(r, pause));
  }
  for (const b of burning) b.kill();
  child.kill();
  socket.destroy();
  sub.disconnect();
  cmd.disconnect();
  await own?.stop();
  const width = Math.max(...WAYS.map((w) => w.length));
  process.stdout.write(
    [
      `transport floor: two idle processes, ${samples} round trips each way, ${burners} CPU burner(s) beside, ${v.redis === undefined ? 'private redis-server' : url}`,
      `command: npm run bench:transport -- ${process.argv.slice(2).join(' ')}`,
      '',
      `  ${'round trip'.padEnd(width)}  p50 / p90 / p99 ms`,
      ...WAYS.map((w, i) => `  ${w.padEnd(width)}  ${stats(rtt[i]!)}`),
      '',
    ].join('\n'),
  );
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:transport: ${(err as Error).message}\n${USAGE}\n`);
  process.exit(1);
});
