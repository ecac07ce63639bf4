"""Splits a PTX module with no .func into one file per .entry: the module's header and
module-scope declarations, then that entry. python3 split_ptx.py in.ptx outdir"""
import os, re, sys
src = open(sys.argv[1]).read().split("\n")
starts = [i for i, l in enumerate(src) if re.match(r"^\.(visible |weak )?\.entry ", l)]
head = "\n".join(src[: starts[0]])
os.makedirs(sys.argv[2], exist_ok=True)
for k, s in enumerate(starts):
    e = starts[k + 1] if k + 1 < len(starts) else len(src)
    name = src[s].split()[2].rstrip("(")
    open(os.path.join(sys.argv[2], name + ".ptx"), "w").write(head + "\n" + "\n".join(src[s:e]) + "\n")
