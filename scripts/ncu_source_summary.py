"""Summarises an Nsight Compute SASS source page (CSV) of one kernel: warp-stall reasons, executed
instructions, shared-memory wavefronts, the instructions with the most stall samples or
bank-conflict excess, and the dynamic instruction mix.

    ncu --section WarpStateStats --section SourceCounters -k regex:stencil --launch-count 1 -o rep ...
    ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv
    python scripts/ncu_source_summary.py src.csv
"""
import csv,sys,collections
fn=sys.argv[1]
rows=list(csv.reader(open(fn)))
hdr=rows[1]; data=rows[2:]
ix={h:i for i,h in enumerate(hdr)}
def v(r,k):
    try: return float(r[ix[k]].replace(',',''))
    except: return 0.0
stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
tot=collections.Counter()
for r in data:
    for s in stalls: tot[s]+=v(r,s)
T=sum(tot.values())
print("total samples",T, [(s,round(100*c/T,1)) for s,c in tot.most_common(8)])
print("instr executed", sum(v(r,'Instructions Executed') for r in data))
print("smem wavefronts", sum(v(r,'L1 Wavefronts Shared') for r in data), "excess", sum(v(r,'L1 Wavefronts Shared Excessive') for r in data))
print("global sectors", sum(v(r,'L2 Theoretical Sectors Global') for r in data), "excess", sum(v(r,'L2 Theoretical Sectors Global Excessive') for r in data))
# top instructions by samples
print("--- top by samples")
for r in sorted(data,key=lambda r:-v(r,'Warp Stall Sampling (All Samples)'))[:25]:
    top=max(stalls,key=lambda s:v(r,s))
    print(r[0][-5:], r[1].strip()[:60].ljust(60), int(v(r,'Warp Stall Sampling (All Samples)')), int(v(r,'Instructions Executed')), top)
print("--- top smem excess")
for r in sorted(data,key=lambda r:-v(r,'L1 Wavefronts Shared Excessive'))[:12]:
    print(r[0][-5:], r[1].strip()[:60].ljust(60), int(v(r,'L1 Wavefronts Shared')), int(v(r,'L1 Wavefronts Shared Excessive')), int(v(r,'Instructions Executed')))
print("--- top global excess")
for r in sorted(data,key=lambda r:-v(r,'L2 Theoretical Sectors Global Excessive'))[:12]:
    print(r[0][-5:], r[1].strip()[:60].ljust(60), int(v(r,'L2 Theoretical Sectors Global')), int(v(r,'L2 Theoretical Sectors Global Excessive')), int(v(r,'Instructions Executed')))
# instruction mix dynamic
mix=collections.Counter()
for r in data:
    t=r[1].strip()
    op=t.split()[0] if t else '?'
    if op.startswith('@'): op=t.split()[1]
    mix[op.split('.')[0]]+=v(r,'Instructions Executed')
print("--- dynamic mix", [(k,int(c)) for k,c in mix.most_common(22)])
