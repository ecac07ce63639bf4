#!/usr/bin/env python3
"""Summarizes an ncu CSV (`ncu --csv --print-units base --metrics ...`) of the decode example's
step: one line a kernel launch (duration in µs, DRAM bytes read, the rate, and any other metric
asked for), then each kernel name's total over the launches. Standard library only.

    python3 scripts/decode_ncu_summary.py ncu.csv
"""
import csv
import sys
from collections import OrderedDict


def main(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("==")))
    if not rows:
        print(f"decode_ncu_summary: no kernels in {path}")
        return 1
    launches = OrderedDict()
    for r in rows:
        key = (int(r["ID"]), r["Kernel Name"])
        launches.setdefault(key, {})[r["Metric Name"]] = r["Metric Value"].replace(",", "")
    extra = sorted({m for v in launches.values() for m in v} - {"gpu__time_duration.sum", "dram__bytes_read.sum"})
    totals = OrderedDict()
    for (i, name), m in launches.items():
        us = float(m.get("gpu__time_duration.sum", 0)) / 1000
        mb = float(m.get("dram__bytes_read.sum", 0)) / 1e6
        rest = " · ".join(f"{e} {m[e]}" for e in extra if e in m)
        print(f"ncu: {i:>4} {name[:40]:40s} {us:8.2f} us {mb:8.2f} MB {mb / us if us else 0:5.2f} TB/s {rest}")
        t = totals.setdefault(name, [0, 0.0])
        t[0] += 1
        t[1] += us
    for name, (n, us) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"ncu: total {name[:40]:40s} {n:4d} launches {us:9.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
