#!/usr/bin/env python3
"""Synthesise openb pod-list variants from the default list, the way the published ones are
described ("sampled from the default one, emphasising certain types of workloads"), to check a
policy beyond the bundled lists. The authors' sampling script is not public here, so these are
look-alikes, not the published files: the targets are the shares the bundled variants show.

  gpushareX  share pods (num_gpu 1, gpu_milli < 1000) carry X % of the requested milli-GPUs
  multigpuX  multi-GPU pods carry X % of the requested milli-GPUs (pods added)
  gpuspecX   X % of the GPU pods get a GPU-model constraint, drawn from gpuspec10's
  cpuX       CPU-only pods ask for X/10 % of the cluster's CPU (pods added or removed)

Usage: trace_variants.py CSV_DIR OUT_DIR [--seed N]   (Python 3 standard library only)
"""
import argparse
import csv
import os
import random

SHARE = lambda r: int(r["num_gpu"]) == 1 and int(r["gpu_milli"]) < 1000
MULTI = lambda r: int(r["num_gpu"]) > 1
CPU_ONLY = lambda r: int(r["num_gpu"]) == 0
GPU = lambda r: int(r["num_gpu"]) > 0
MILLI = lambda r: int(r["num_gpu"]) * int(r["gpu_milli"])


def write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for i, r in enumerate(rows):
            r = dict(r)
            r["name"] = "openb-pod-%04d" % i
            w.writerow(r)


def gpushare(rows, target, rng):
    rows = [dict(r) for r in rows]
    shares = [r for r in rows if SHARE(r)]
    whole = [r for r in rows if GPU(r) and not SHARE(r)]
    total = sum(MILLI(r) for r in rows)
    shared = sum(MILLI(r) for r in rows if SHARE(r))
    # Replace pods of the other kind by copies of random pods of the wanted kind.
    others = [i for i, r in enumerate(rows) if GPU(r) and not SHARE(r)]
    rng.shuffle(others)
    while shared / total < target and others:
        i = others.pop()
        new = dict(rng.choice(shares))
        total += MILLI(new) - MILLI(rows[i])
        shared += MILLI(new)
        rows[i] = new
    mine = [i for i, r in enumerate(rows) if SHARE(r)]
    rng.shuffle(mine)
    while shared / total > target + 0.005 and mine:
        i = mine.pop()
        new = dict(rng.choice(whole))
        total += MILLI(new) - MILLI(rows[i])
        shared -= MILLI(rows[i])
        rows[i] = new
    return rows


def multigpu(rows, target, rng):
    rows = [dict(r) for r in rows]
    multis = [r for r in rows if MULTI(r)]
    total = sum(MILLI(r) for r in rows)
    multi = sum(MILLI(r) for r in rows if MULTI(r))
    while multi / total < target:
        new = dict(rng.choice(multis))
        rows.insert(rng.randrange(len(rows) + 1), new)
        total += MILLI(new)
        multi += MILLI(new)
    return rows


def gpuspec(rows, target, specs, rng):
    rows = [dict(r) for r in rows]
    gpu = [i for i, r in enumerate(rows) if GPU(r)]
    for i in rng.sample(gpu, round(target * len(gpu))):
        rows[i]["gpu_spec"] = rng.choice(specs)
    return rows


def cpu(rows, target_cores, rng):
    rows = [dict(r) for r in rows]
    cpus = [r for r in rows if CPU_ONLY(r)]
    have = sum(int(r["cpu_milli"]) for r in cpus) / 1000
    if have > target_cores:
        idx = [i for i, r in enumerate(rows) if CPU_ONLY(r)]
        rng.shuffle(idx)
        drop = set()
        while have > target_cores and idx:
            i = idx.pop()
            drop.add(i)
            have -= int(rows[i]["cpu_milli"]) / 1000
        rows = [r for i, r in enumerate(rows) if i not in drop]
    while have < target_cores:
        new = dict(rng.choice(cpus))
        rows.insert(rng.randrange(len(rows) + 1), new)
        have += int(new["cpu_milli"]) / 1000
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    with open(os.path.join(a.csv_dir, "openb_pod_list_default.csv")) as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        rows = list(reader)
    with open(os.path.join(a.csv_dir, "openb_pod_list_gpuspec10.csv")) as f:
        specs = [r["gpu_spec"] for r in csv.DictReader(f) if r["gpu_spec"] not in ("", "nan")]
    with open(os.path.join(a.csv_dir, "openb_node_list_gpu_node.csv")) as f:
        cluster_cores = sum(int(r["cpu_milli"]) for r in csv.DictReader(f)) / 1000
    os.makedirs(a.out_dir, exist_ok=True)
    out = lambda name, rs: write(os.path.join(a.out_dir, "openb_pod_list_%s.csv" % name), header, rs)
    for x in (20, 60, 80, 100):
        out("gpushare%d" % x, gpushare(rows, x / 100, random.Random(a.seed + x)))
    for x in (30, 40, 50):
        out("multigpu%d" % x, multigpu(rows, x / 100, random.Random(a.seed + x)))
    for x in (20, 25, 33):
        out("gpuspec%d" % x, gpuspec(rows, x / 100, specs, random.Random(a.seed + x)))
    for x in (100, 200, 250):
        out("cpu%03d" % x, cpu(rows, cluster_cores * x / 1000, random.Random(a.seed + x)))


if __name__ == "__main__":
    main()
