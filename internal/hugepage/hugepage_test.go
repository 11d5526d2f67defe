package hugepage

import "testing"

func TestZeroedAndSized(t *testing.T) {
	for _, n := range []int{0, 1, minBytes/4 - 1, minBytes, 3*minBytes + 5} {
		f := Float32s(n)
		d := Float64s(n)
		b := Bytes(n)
		if len(f) != n || len(d) != n || len(b) != n {
			t.Fatalf("n=%d: got lengths %d, %d and %d", n, len(f), len(d), len(b))
		}
		for i := range f {
			if f[i] != 0 || d[i] != 0 || b[i] != 0 {
				t.Fatalf("n=%d: element %d not zero", n, i)
			}
			f[i], d[i], b[i] = 1, 1, 1
		}
	}
}
