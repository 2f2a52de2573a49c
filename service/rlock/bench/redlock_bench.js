'use strict';
// node-redlock under the rlock-bench workloads (rlock_bench.c), for
// bench-rlock.sh: prints the same key=value line as rlock-bench.
//
//   cd <folder with node_modules/redlock and ioredis> &&
//   node redlock_bench.js --redis-url URL --mode uncontended|contended
//        [--concurrency 50] [--duration-ms 5000] [--ttl-ms 10000] [--retry-ms 10]
//
// Both APIs: 4.x exports the class (lock(key, ttl) / unlock(), attempts a
// count); 5.x is built from TypeScript as ESM and CommonJS, and its
// CommonJS build exports the class as "default" (acquire([key], ttl) /
// release(), attempts an array of per-attempt stats).
const fs = require('fs');
const path = require('path');

const fromCwd = (m) => require(require.resolve(m, { paths: [process.cwd()] }));
const Redis = fromCwd('ioredis');
const mod = fromCwd('redlock');
// (5.x's "exports" do not include its package.json, which says "v5...")
const version = JSON.parse(fs.readFileSync(
    path.join(process.cwd(), 'node_modules', 'redlock', 'package.json'), 'utf8'))
    .version.replace(/^v/, '');
const v5 = typeof mod.default === 'function';
const Redlock = v5 ? mod.default : mod;

const arg = (name, dflt) => {
    const i = process.argv.indexOf('--' + name);
    return i > 0 ? process.argv[i + 1] : dflt;
};
const url = arg('redis-url');
const mode = arg('mode');
const concurrency = Number(arg('concurrency', 50));
const durationMs = Number(arg('duration-ms', 5000));
const ttlMs = Number(arg('ttl-ms', 10000));
const retryMs = Number(arg('retry-ms', 10));
const contended = mode === 'contended';

// One connection, as rlock's one hiredis context.
const client = new Redis(url, { enableOfflineQueue: true, maxRetriesPerRequest: 1 });
// Same retry policy as rlock: uniform in [retry/2, retry*3/2] (both versions
// wait retryDelay + (2 * random - 1) * retryJitter); the same drift.
const redlock = new Redlock([client], {
    driftFactor: 0.01,
    retryCount: contended ? -1 : 0,
    retryDelay: retryMs,
    retryJitter: retryMs / 2,
});
const lockIt = v5 ? (key) => redlock.acquire([key], ttlMs) : (key) => redlock.lock(key, ttlMs);
const unlockIt = v5 ? (lock) => lock.release() : (lock) => lock.unlock();
const attempts = v5 ? (lock) => lock.attempts.length : (lock) => lock.attempts;

const now = () => Number(process.hrtime.bigint());
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const jitter = () => retryMs / 2 + Math.random() * retryMs;

const runId = now() % 1000000;
let stopping = false;
let pairs = 0, busy = 0, errors = 0, lastRelease = 0, firstError = '';
const pairNs = [], handoverNs = [];
let stopAt = 0;

async function worker(i) {
    const key = contended ? `rlock-bench:${runId}:{contended}` : `rlock-bench:${runId}:{key:${i}}`;
    while (!stopping) {
        if (contended)
            await sleep(jitter());
        if (stopping)
            break;
        const t0 = now();
        let lock;
        try {
            lock = await lockIt(key);
        } catch (e) {
            if (!stopping) {
                errors++;
                firstError = firstError || String(e);
            }
            break;
        }
        busy += attempts(lock) - 1;
        if (contended && lastRelease)
            handoverNs.push(now() - lastRelease);
        await unlockIt(lock);
        const t = now();
        lastRelease = t;
        if (t <= stopAt) {
            pairs++;
            pairNs.push(t - t0);
        }
    }
}

const q = (a, p) => {
    if (!a.length)
        return 'nan';
    a.sort((x, y) => x - y);
    return (a[Math.max(0, Math.ceil(p * a.length) - 1)] / 1e6).toFixed(3);
};

(async () => {
    await client.ping();
    stopAt = now() + durationMs * 1e6;
    const workers = [];
    for (let i = 0; i < concurrency; i++)
        workers.push(worker(i));
    await sleep(durationMs);
    stopping = true;
    // Waiters inside an endless retry never return: give in-flight pairs a
    // moment, then report.
    await Promise.race([Promise.all(workers), sleep(2000)]);
    const secs = durationMs / 1000;
    console.log(`mode=${mode} impl=node-redlock-${version} concurrency=${concurrency} ` +
        `duration_s=${secs.toFixed(2)} pairs=${pairs} pairs_per_s=${Math.round(pairs / secs)} ` +
        `pair_p50_ms=${q(pairNs, 0.5)} pair_p99_ms=${q(pairNs, 0.99)} ` +
        `handover_p50_ms=${q(handoverNs, 0.5)} handover_p99_ms=${q(handoverNs, 0.99)} ` +
        `busy_retries=${busy} lost=0 errors=${errors}`);
    if (errors)
        console.error(`${path.basename(__filename)} (redlock ${version}): ${errors} errors, ` +
            `first: ${firstError}`);
    client.disconnect();
    process.exit(errors ? 1 : 0);
})().catch((e) => {
    console.error(`${path.basename(__filename)}:`, e);
    process.exit(1);
});
