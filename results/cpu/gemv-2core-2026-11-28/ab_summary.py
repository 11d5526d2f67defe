import sys, glob, re, statistics as st
d = sys.argv[1]
rows = {}
for b in ['old', 'new']:
    for f in sorted(glob.glob(f'{d}/{b}-*.txt')):
        t = open(f).read()
        load = t.splitlines()[0]
        m = re.search(r'\| cpu \| fp32 \| true \| 224 \| 1 \| \d+ \| ([\d.]+) \| ([\d.]+) \|', t)
        sec = t.split('per-layer time: cpu fp32 compile=true')[1]
        g = [float(x) for x in re.findall(r'\| classifier\.\d \| Gemm \| \S+ [\dx]+ \| ([\d.]+) \|', sec)]
        tot = sum(float(x) for x in re.findall(r'\| [\d.]+ \| [\d.]+% \|', sec) and re.findall(r'\| ([\d.]+) \| [\d.]+% \|\n', sec.split('### by kind')[0]))
        rows.setdefault(b, []).append((float(m.group(1)), float(m.group(2)), g, tot, load))
for b, rs in rows.items():
    for r in rs: print(b, r)
for b, rs in rows.items():
    print(b, 'median mean ms %.3f p50 %.3f gemm0 %.4f gemm1 %.4f steps-sum %.3f' % (
        st.median(r[0] for r in rs), st.median(r[1] for r in rs),
        st.median(r[2][0] for r in rs), st.median(r[2][1] for r in rs), st.median(r[3] for r in rs)))
