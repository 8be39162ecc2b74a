import { expect } from 'chai';
import { existsSync, readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { Express } from 'express';
import { Redis } from 'ioredis';
import { chromium, type Browser } from 'playwright-core';
import request from 'supertest';
import { createAdminApp } from '../../admin/app.js';
import { SCHEMA_VERSION } from '../../bus/codec.js';
import { PolicyStore } from '../../bus/policy-store.js';
import { StoreSigner } from '../../bus/store-signature.js';
import { KeyHasher } from '../../lib/key-id.js';
import type { PolicyDoc } from '../../lib/policy.js';
import { RELEASE } from '../../middleware/release.js';
import { startFleet, type Fleet } from '../../scripts/fleet.js';
import { startRedis, type RedisProcess } from '../../scripts/redis-server.js';
import { until } from '../support/redis-members.js';

/** Debian's chromium package; CI installs it, so there this test never skips. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
/** The flags a headless Chromium needs on a machine with no outside network. */
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const KEY_HASH_SECRET = 'admin-ui-e2e-key-hash-secret';
const ADMIN = 'admin-ui-e2e-token-0123456789abcdef';
const GLASS = 'admin-ui-e2e-break-glass-0123456789abcdef';
/** `UPDATE_SCREENSHOT=1` rewrites the README's picture of the page from this run. */
const SCREENSHOT = fileURLToPath(new URL('../../../docs/admin-ui.png', import.meta.url));

describe('the enforcement-health page in headless Chromium, against a fleet of three gateway processes', function () {
  this.timeout(120_000);
  let redis: RedisProcess;
  let raw: Redis;
  let fleet: Fleet;
  let server: Server;
  let base: string;
  let browser: Browser;
  let app: Express;

  before(async function () {
    if (!existsSync(CHROMIUM)) {
      if (process.env.CI) throw new Error(`${CHROMIUM} is missing: CI installs Debian's chromium package for this test`);
      this.skip();
    }
    redis = await startRedis();
    raw = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    fleet = await startFleet({ nodes: 3, redisUrl: redis.url, env: { KEY_HASH_SECRET } });
    app = createAdminApp({
      store: new PolicyStore(raw, new StoreSigner([{ version: 'p1', secret: fleet.env.POLICY_SECRET! }])),
      redis: raw,
      adminToken: ADMIN,
      breakGlassToken: GLASS,
      keyHash: { versions: [{ version: 'v1', secret: KEY_HASH_SECRET }] },
    });
    // The demo's policy stored through the admin API, as an operator would.
    const hasher = new KeyHasher([{ version: 'v1', secret: KEY_HASH_SECRET }]);
    const file = JSON.parse(readFileSync(fileURLToPath(new URL('../../../demo/policy.json', import.meta.url)), 'utf8')) as { demoKeys: Record<string, { plan: string }>; policy: PolicyDoc };
    const keys = Object.fromEntries(Object.entries(file.demoKeys).map(([k, v]) => [hasher.hash(k), { plan: v.plan }]));
    await request(app)
      .put('/admin/v1/policy')
      .set({ Authorization: `Bearer ${ADMIN}` })
      .send({ policy: { ...file.policy, keys }, reason: 'the demo policy, stored' })
      .expect(200);
    // Ok, and every node's status (published once a second) counting the shards it owns now.
    await until(
      async () => {
        const h = (
          await request(app)
            .get('/admin/v1/health')
            .set({ Authorization: `Bearer ${ADMIN}` })
        ).body as { ok?: boolean; nodes?: Array<{ status: { ownedShards: number } | null }> };
        return h.ok === true && (h.nodes ?? []).reduce((n, x) => n + (x.status?.ownedShards ?? 0), 0) === 64;
      },
      'the fleet to report ok with its 64 shards in the nodes’ statuses',
      30_000,
    );
    // Some traffic, so owners hold credit the page shows against allowance.
    for (const n of fleet.nodes) for (const key of Object.keys(file.demoKeys)) await (await fetch(`${n.url}/api/hello`, { headers: { 'x-api-key': key } })).body?.cancel();
    server = app.listen(0, '127.0.0.1');
    await new Promise((r) => server.once('listening', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });
  after(async () => {
    await browser?.close();
    server?.close();
    await fleet?.stop();
    raw?.disconnect();
    await redis?.stop();
  });

  it('signs in through the form and shows, at a glance, every node enforcing the stored policy', async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 520 } });
    try {
      await page.goto(`${base}/admin/ui`);
      await page.fill('input[name=token]', ADMIN);
      await Promise.all([page.waitForURL(`${base}/admin/ui`), page.click('button[type=submit]')]);
      const verdict = page.locator('.verdict');
      // The fleet was ok a moment ago; beside busy processes a shard's lease can lapse between two
      // rounds, and the page (reloading itself every 5 s) shows that as it is. Wait for it to be ok.
      await until(async () => (await verdict.getAttribute('data-ok')) === 'true', 'the page to show the fleet ok', 20_000);
      expect(await verdict.innerText()).to.equal('Every node is enforcing the stored policy');
      const rows = await page.locator('tbody tr').allInnerTexts();
      expect(rows.map((r) => r.split('\t')[0]).sort()).to.deep.equal(fleet.nodes.map((n) => n.nodeId).sort());
      // Every node on this release, policy version 1, enforcing, not degraded.
      for (const r of rows) expect(r.split('\t').slice(1, 5)).to.deep.equal([`${RELEASE} (schema ${SCHEMA_VERSION})`, '1', 'yes', 'no']);
      // Each row shows the shards its node said it owned at its last status (once a second); on a
      // starved machine ownership can move between two statuses, so only the table's total is exact.
      const owned = rows.map((r) => Number(r.split('\t')[6]));
      expect(
        owned.every((n) => Number.isInteger(n) && n >= 0),
        rows.join(' | '),
      ).to.equal(true);
      expect(owned.some((n) => n > 0)).to.equal(true);
      expect(await page.locator('dl.summary').innerText()).to.match(/Shards owned\s+64 \/ 64/);
      if (process.env.UPDATE_SCREENSHOT === '1') await page.screenshot({ path: SCREENSHOT, fullPage: true });

      // Enforcement switched off: the page, reloading itself, says so within a reload or two.
      await request(app)
        .post('/admin/v1/kill-switch')
        .set({ Authorization: `Bearer ${GLASS}` })
        .send({ enforce: false, reason: 'e2e: the page must notice' })
        .expect(200);
      await until(async () => (await page.locator('.verdict').getAttribute('data-ok')) === 'false', 'the page to reload and say not ok', 20_000);
      expect(await page.locator('.verdict').innerText()).to.include('The kill switch has enforcement off');
    } finally {
      await page.close();
    }
  });
});
