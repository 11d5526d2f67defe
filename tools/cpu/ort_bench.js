#!/usr/bin/env node
// ort_bench.js times an ONNX image model on onnxruntime's CPU provider
// through the npm package onnxruntime-node (the same native library as the
// Python wheel), for machines without onnxruntime's Python package.
//
// Setup, once, in a scratch directory outside the repository:
//
//	mkdir -p /tmp/ort && cd /tmp/ort && npm install --ignore-scripts onnxruntime-node
//
// Usage:
//
//	NODE_PATH=/tmp/ort/node_modules node tools/cpu/ort_bench.js \
//	    --model resnet18.onnx [--threads 1,2] [--batches 1,32] \
//	    [--iters 20] [--warmup 3] [--size 224] [--spin 0|1]
//
// Each cell prints one line: wall-clock img/s (batch / mean time per run),
// mean, median and best ms per run, and CPU ms per run (user + system time
// of this process over the timed runs). On a machine shared with other work
// the best and the CPU figures are the comparable ones; --spin 0 (the
// default) turns off the intra-op pool's busy waiting, which would
// otherwise count as CPU time. Inputs are random in [0, 1); the model's
// first input is fed, every output fetched.
'use strict';

const ort = require('onnxruntime-node');

function parseArgs(argv) {
  const o = { model: '', threads: '1,2', batches: '1,32', iters: 20, warmup: 3, size: 224, spin: 0 };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i].replace(/^--/, '');
    if (!(k in o) || i + 1 >= argv.length) {
      throw new Error(`unknown or incomplete flag ${argv[i]}; flags: ${Object.keys(o).map((x) => '--' + x).join(' ')}`);
    }
    const v = argv[++i];
    o[k] = typeof o[k] === 'number' ? Number(v) : v;
  }
  if (!o.model) throw new Error('--model FILE.onnx is required');
  return o;
}

function ms(ns) { return Number(ns) / 1e6; }

async function cell(o, threads, batch) {
  const session = await ort.InferenceSession.create(o.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    extra: { session: { intra_op: { allow_spinning: String(o.spin) } } },
  });
  const n = batch * 3 * o.size * o.size;
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.random();
  const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, [batch, 3, o.size, o.size]) };
  for (let i = 0; i < o.warmup; i++) await session.run(feeds);
  const times = [];
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < o.iters; i++) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(ms(process.hrtime.bigint() - t0));
  }
  const cpu = process.cpuUsage(cpu0);
  await session.release();
  times.sort((a, b) => a - b);
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  return {
    threads, batch,
    imgPerS: (batch * 1000) / mean,
    meanMs: mean, medianMs: times[times.length >> 1], bestMs: times[0],
    cpuMs: (cpu.user + cpu.system) / 1000 / o.iters,
  };
}

async function main() {
  const o = parseArgs(process.argv);
  console.log(`onnxruntime-node ${require('onnxruntime-node/package.json').version}, ${o.model}, ${o.iters} timed runs after ${o.warmup}, spin ${o.spin}`);
  console.log('| threads | batch | img/s | mean ms | median ms | best ms | best img/s | CPU ms/run | img/cpu-s |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const t of o.threads.split(',').map(Number)) {
    for (const b of o.batches.split(',').map(Number)) {
      const r = await cell(o, t, b);
      console.log(`| ${t} | ${b} | ${r.imgPerS.toFixed(1)} | ${r.meanMs.toFixed(2)} | ${r.medianMs.toFixed(2)} | ${r.bestMs.toFixed(2)} | ${(b * 1000 / r.bestMs).toFixed(1)} | ${r.cpuMs.toFixed(2)} | ${(b * 1000 / r.cpuMs).toFixed(1)} |`);
    }
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
