package winograd

//go:generate go run gen_transform.go gen_asm.go

// Epilogue flags of the output transform.
const (
	flagBias = 1 << iota
	flagRes
	flagReLU
)

// inputGo transforms nc channels of a panel's tiles: channel c's patches
// are read from src[c*plane+...] and its 36 transformed vectors written to
// v[pt*xs+c*lanes...] for each point pt.
func inputGo(src []float32, plane int, p *Panel, nc int, v []float32, xs int) {
	var d [In][lanes]float32
	for c := range nc {
		s := src[c*plane:]
		for y := range In {
			for x := range In {
				m := p.inMask[y*In+x]
				for l := range lanes {
					d[x][l] = 0
					if m>>l&1 != 0 {
						d[x][l] = s[p.in[y*In+x][l]]
					}
				}
			}
			for l := range lanes {
				r := inputRow(d[0][l], d[1][l], d[2][l], d[3][l], d[4][l], d[5][l])
				for j := range In {
					p.tmp[y*In+j][l] = r[j]
				}
			}
		}
		for j := range In {
			for l := range lanes {
				t := &p.tmp
				r := inputRow(t[j][l], t[In+j][l], t[2*In+j][l], t[3*In+j][l], t[4*In+j][l], t[5*In+j][l])
				for i := range In {
					v[(i*In+j)*xs+c*lanes+l] = r[i]
				}
			}
		}
	}
}

// inputRow is Bt applied to 6 values.
func inputRow(d0, d1, d2, d3, d4, d5 float32) [In]float32 {
	t1, t2 := d4-4*d2, d3-4*d1
	t3, t4 := d4-d2, 2*(d3-d1)
	return [In]float32{d4 + 4*d0 - 5*d2, t1 + t2, t1 - t2, t3 + t4, t3 - t4, d5 + 4*d1 - 5*d3}
}

// outputRow is At applied to 6 values.
func outputRow(m0, m1, m2, m3, m4, m5 float32) [Out]float32 {
	a, b, c, d := m1+m2, m1-m2, m3+m4, m3-m4
	return [Out]float32{m0 + a + c, b + 2*d, a + 4*c, b + 8*d + m5}
}

// outputGo transforms nk output channels of a panel's tiles back: channel
// k's 36 point values are m[pt*xs+k*ld...]; its outputs go to
// dst[k*plane+...], plus bias[k], plus res (laid out as dst), through ReLU
// as flags say.
func outputGo(m []float32, xs, ld, nk int, dst, res []float32, plane int, p *Panel, bias []float32, flags int) {
	for k := range nk {
		t := &p.tmp
		for j := range In {
			for l := range lanes {
				o := k*ld + l
				r := outputRow(m[j*xs+o], m[(In+j)*xs+o], m[(2*In+j)*xs+o], m[(3*In+j)*xs+o], m[(4*In+j)*xs+o], m[(5*In+j)*xs+o])
				for i := range Out {
					t[i*In+j][l] = r[i]
				}
			}
		}
		var b float32
		if flags&flagBias != 0 {
			b = bias[k]
		}
		d := dst[k*plane:]
		var rs []float32
		if flags&flagRes != 0 {
			rs = res[k*plane:]
		}
		for i := range Out {
			for l := range lanes {
				r := outputRow(t[i*In][l], t[i*In+1][l], t[i*In+2][l], t[i*In+3][l], t[i*In+4][l], t[i*In+5][l])
				for j := range Out {
					pos := i*Out + j
					if p.outMask[pos]>>l&1 == 0 {
						continue
					}
					o := p.out[pos][l]
					y := r[j] + b
					if rs != nil {
						y += rs[o]
					}
					if flags&flagReLU != 0 && y < 0 { // NaN stays NaN
						y = 0
					}
					d[o] = y
				}
			}
		}
	}
}
