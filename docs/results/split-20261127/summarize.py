# Before/after medians of the daemon split: run in this directory (python3 summarize.py).
import json, statistics as st, sys, glob, collections
def load(path):
    return [json.loads(l) for l in open(path) if l.strip()]
def med(xs): return st.median(xs) if xs else float('nan')
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for side in ('before','after'):
    for f in glob.glob(f'./{side}-r*/restore.jsonl'):
        for r in load(f):
            k=('restore',r['strategy'],r['pool'],r['concurrency'])
            rows[k][side].append(r)
    for f in glob.glob(f'./{side}-r*/eval.jsonl'):
        for r in load(f):
            if r.get('experiment')!='exec': continue
            k=('exec',r['strategy'],r['record']+'>'+r['test'],'')
            rows[k][side].append(r)
print('| bench | strategy | mode | N | n before/after | set-up before → after | total before → after |')
print('|---|---|---|---:|---|---:|---:|')
for k in sorted(rows, key=str):
    b,a=rows[k]['before'],rows[k]['after']
    f=lambda xs,key: med([x[key] for x in xs if key in x])
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {len(b)}/{len(a)} | {f(b,'setup_ms'):.1f} → {f(a,'setup_ms'):.1f} | {f(b,'total_ms'):.1f} → {f(a,'total_ms'):.1f} |")
