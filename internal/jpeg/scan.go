package jpeg

import (
	"errors"
	"fmt"
)

// scan is one SOS header: the components it codes and, for progressive
// scans, the spectral band Ss..Se and the successive-approximation bits.
type scan struct {
	comps  []*component
	ss, se int
	ah, al uint
}

func (d *decoder) parseSOS(seg []byte) error {
	if !d.frame {
		return errors.New("jpeg: SOS before a frame header")
	}
	d.scans++
	if d.scans > maxScans {
		return fmt.Errorf("jpeg: more than %d scans", maxScans)
	}
	if len(seg) < 1 {
		return fmt.Errorf("jpeg: %w in an SOS segment", errTruncated)
	}
	ns := int(seg[0])
	if ns < 1 || ns > len(d.comps) || len(seg) != 4+2*ns {
		return fmt.Errorf("jpeg: SOS of %d bytes for %d components (frame has %d)", len(seg), ns, len(d.comps))
	}
	var sc scan
	blocks := 0
	for i := range ns {
		id, tabs := seg[1+2*i], seg[2+2*i]
		var c *component
		for j := range d.comps {
			if d.comps[j].id == id {
				c = &d.comps[j]
			}
		}
		if c == nil {
			return fmt.Errorf("jpeg: scan names component %d, not in the frame", id)
		}
		for _, o := range sc.comps {
			if o == c {
				return fmt.Errorf("jpeg: scan names component %d twice", id)
			}
		}
		c.dcTab, c.acTab = tabs>>4, tabs&15
		if c.dcTab > 3 || c.acTab > 3 {
			return fmt.Errorf("jpeg: component %d uses Huffman tables %d/%d (0-3 allowed)", id, c.dcTab, c.acTab)
		}
		blocks += c.h * c.v
		sc.comps = append(sc.comps, c)
	}
	if ns > 1 && blocks > 10 {
		return fmt.Errorf("jpeg: an interleaved MCU of %d blocks (10 at most)", blocks)
	}
	p := seg[1+2*ns:]
	sc.ss, sc.se, sc.ah, sc.al = int(p[0]), int(p[1]), uint(p[2]>>4), uint(p[2]&15)
	if d.progressive {
		bad := sc.se > 63 || sc.ss > sc.se || sc.al > 13 || sc.ah > 13 ||
			(sc.ss == 0 && sc.se != 0) || (sc.ss > 0 && ns != 1)
		if bad {
			return fmt.Errorf("jpeg: invalid progressive scan (Ss=%d Se=%d Ah=%d Al=%d, %d components)", sc.ss, sc.se, sc.ah, sc.al, ns)
		}
	} else {
		sc.ss, sc.se, sc.ah, sc.al = 0, 63, 0, 0
	}
	for _, c := range sc.comps {
		if d.progressive && sc.ss > 0 && !c.dcSeen {
			return fmt.Errorf("jpeg: AC scan of component %d before its DC scan", c.id)
		}
		if sc.ss == 0 {
			c.dcSeen = true
		}
		if !c.latched {
			// An undefined table reads as zeros (libjpeg refuses the file,
			// image/jpeg decodes it; we follow the more lenient).
			for k, q := range d.qt[c.tq] {
				c.qt[k] = int32(q)
			}
			c.latched = true
		}
	}
	d.allocate()
	return d.decodeScan(&sc)
}

// allocate makes the sample planes (and coefficient arrays of a
// progressive image) once the frame and a scan have been checked.
func (d *decoder) allocate() {
	if d.allocated {
		return
	}
	d.allocated = true
	for i := range d.comps {
		c := &d.comps[i]
		c.pix = make([]uint8, c.bw*8*c.bh*8)
		if d.progressive {
			c.coef = make([]int16, c.bw*c.bh*64)
		}
	}
}

// decodeScan decodes the entropy-coded segment after an SOS header.
func (d *decoder) decodeScan(sc *scan) error {
	r := bitReader{data: d.data, pos: d.pos}
	nx, ny := d.mcusX, d.mcusY
	single := len(sc.comps) == 1
	if single {
		nx, ny = sc.comps[0].sw, sc.comps[0].sh
	}
	for _, c := range sc.comps {
		c.pred = 0
	}
	d.eobrun = 0
	for m, total := 0, nx*ny; m < total; m++ {
		if d.ri > 0 && m > 0 && m%d.ri == 0 {
			if err := d.restart(&r, sc); err != nil {
				return err
			}
		}
		mx, my := m%nx, m/nx
		for _, c := range sc.comps {
			bx, by, bh, bv := mx, my, 1, 1
			if !single {
				bx, by, bh, bv = mx*c.h, my*c.v, c.h, c.v
			}
			for j := range bv {
				for i := range bh {
					if err := d.decodeBlock(&r, sc, c, bx+i, by+j); err != nil {
						return fmt.Errorf("jpeg: scan %d, block (%d,%d) of component %d: %w", d.scans, bx+i, by+j, c.id, err)
					}
				}
			}
		}
		if r.overrun() {
			return fmt.Errorf("jpeg: %w: scan %d ends after %d of %d MCUs", errTruncated, d.scans, m, total)
		}
		if d.work > workBase+workPerByte*len(d.data) {
			return fmt.Errorf("jpeg: scan %d: end-of-band runs ask for more than %d coefficient visits per byte of the file", d.scans, workPerByte)
		}
	}
	d.pos = r.pos
	return nil
}

// restart consumes the RSTn marker due after every d.ri MCUs and resets
// the predictors.
func (d *decoder) restart(r *bitReader, sc *scan) error {
	if r.overrun() {
		return fmt.Errorf("jpeg: %w in scan %d before a restart marker", errTruncated, d.scans)
	}
	r.reset()
	d.pos = r.pos
	m, err := d.nextMarker()
	if err != nil {
		return err
	}
	if m < mRST0 || m > mRST7 {
		return fmt.Errorf("jpeg: marker 0x%02X where a restart marker was due in scan %d", m, d.scans)
	}
	r.pos = d.pos
	for _, c := range sc.comps {
		c.pred = 0
	}
	d.eobrun = 0
	return nil
}

func (d *decoder) decodeBlock(r *bitReader, sc *scan, c *component, bx, by int) error {
	if !d.progressive {
		return d.decodeBaseline(r, c, bx, by)
	}
	coef := (*[64]int16)(c.coef[(by*c.bw+bx)*64:])
	switch {
	case sc.ss == 0 && sc.ah == 0:
		s, err := r.decode(&d.dc[c.dcTab])
		if err != nil {
			return err
		}
		if s > 16 {
			return fmt.Errorf("DC difference category %d (16 at most)", s)
		}
		c.pred += r.receiveExtend(uint(s))
		coef[0] = int16(c.pred << sc.al)
	case sc.ss == 0:
		if r.bit() {
			coef[0] |= 1 << sc.al
		}
	case sc.ah == 0:
		return d.acFirst(r, sc, c, coef)
	default:
		return d.acRefine(r, sc, c, coef)
	}
	return nil
}

// decodeBaseline decodes one sequential block and writes its samples.
func (d *decoder) decodeBaseline(r *bitReader, c *component, bx, by int) error {
	blk := &d.blk
	*blk = [64]int32{}
	s, err := r.decode(&d.dc[c.dcTab])
	if err != nil {
		return err
	}
	if s > 16 {
		return fmt.Errorf("DC difference category %d (16 at most)", s)
	}
	c.pred += r.receiveExtend(uint(s))
	blk[0] = c.pred * c.qt[0]
	ac := &d.ac[c.acTab]
	k := 1
	if d.eobrun > 0 {
		d.eobrun--
		k = 64
	}
	for ; k < 64; k++ {
		rs, err := r.decode(ac)
		if err != nil {
			return err
		}
		run, size := int(rs>>4), uint(rs&15)
		if size == 0 {
			if run != 15 {
				// End of block. Sequential tables have no EOBn symbols
				// (run 1-14, size 0); libjpeg reads them as a plain EOB,
				// image/jpeg as the end-of-band run of a progressive scan.
				// We follow image/jpeg, so that what it decodes decodes
				// here too.
				if run > 0 {
					d.eobrun = 1<<run - 1 + r.bits(uint(run))
				}
				break
			}
			k += 15
			continue
		}
		k += run
		if k > 63 {
			// A run past the block's end is corrupt data. libjpeg reads the
			// value into the last coefficient; image/jpeg ends the block
			// without reading it. We follow image/jpeg, so that every
			// file it decodes decodes here too.
			break
		}
		z := unzig[k]
		blk[z] = r.receiveExtend(size) * c.qt[z]
	}
	stride := c.bw * 8
	idct(blk, c.pix[by*8*stride+bx*8:], stride)
	return nil
}

// acFirst decodes the first scan of a spectral band (T.81 G.1.2.2).
func (d *decoder) acFirst(r *bitReader, sc *scan, c *component, coef *[64]int16) error {
	if d.eobrun > 0 {
		d.eobrun--
		d.work++
		return nil
	}
	ac := &d.ac[c.acTab]
	for k := sc.ss; k <= sc.se; k++ {
		rs, err := r.decode(ac)
		if err != nil {
			return err
		}
		run, size := int(rs>>4), uint(rs&15)
		if size == 0 {
			if run != 15 {
				// EOBn: this block and the next 2^run - 1 + bits end here.
				d.eobrun = 1<<run - 1 + r.bits(uint(run))
				return nil
			}
			k += 15
			continue
		}
		k += run
		if k > sc.se {
			break // past the band: corrupt, handled as in decodeBaseline
		}
		coef[unzig[k]] = int16(r.receiveExtend(size) << sc.al)
	}
	return nil
}

// acRefine adds one bit of precision to a band (T.81 G.1.2.3): a
// correction bit for every coefficient already nonzero, and new
// coefficients of magnitude 1 placed among the zero ones.
func (d *decoder) acRefine(r *bitReader, sc *scan, c *component, coef *[64]int16) error {
	p1 := int16(1) << sc.al
	m1 := int16(-1) << sc.al
	k := sc.ss
	if d.eobrun == 0 {
		ac := &d.ac[c.acTab]
		for k <= sc.se {
			rs, err := r.decode(ac)
			if err != nil {
				return err
			}
			zeros, size := int(rs>>4), rs&15
			var val int16
			if size == 0 {
				if zeros != 15 {
					d.eobrun = 1<<zeros + r.bits(uint(zeros))
					break
				}
				// ZRL: skip 16 zero coefficients.
			} else {
				// size must be 1; libjpeg reads other values the same way.
				val = m1
				if r.bit() {
					val = p1
				}
			}
			// Walk past already-nonzero coefficients, refining them, until
			// the zeros-th zero coefficient, which takes val.
			for ; k <= sc.se; k++ {
				z := &coef[unzig[k]]
				if *z != 0 {
					refine(r, z, p1, m1)
					continue
				}
				if zeros == 0 {
					if val != 0 {
						*z = val
					}
					k++
					break
				}
				zeros--
			}
		}
	}
	if d.eobrun > 0 {
		// The rest of the band is in an end-of-band run: only corrections.
		d.work += sc.se - k + 1
		for ; k <= sc.se; k++ {
			if z := &coef[unzig[k]]; *z != 0 {
				refine(r, z, p1, m1)
			}
		}
		d.eobrun--
	}
	return nil
}

// refine applies a correction bit to a nonzero coefficient: a 1 adds the
// current bit to its magnitude unless it is already set.
func refine(r *bitReader, z *int16, p1, m1 int16) {
	if r.bit() && *z&p1 == 0 {
		if *z >= 0 {
			*z += p1
		} else {
			*z += m1
		}
	}
}

// finish dequantizes and transforms a progressive image's coefficients.
func (d *decoder) finish() {
	if !d.progressive {
		return
	}
	for i := range d.comps {
		c := &d.comps[i]
		stride := c.bw * 8
		for by := 0; by < c.sh; by++ {
			for bx := 0; bx < c.sw; bx++ {
				coef := (*[64]int16)(c.coef[(by*c.bw+bx)*64:])
				for k, v := range coef {
					d.blk[k] = int32(v) * c.qt[k]
				}
				idct(&d.blk, c.pix[by*8*stride+bx*8:], stride)
			}
		}
	}
}
