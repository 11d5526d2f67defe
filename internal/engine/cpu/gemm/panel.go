package gemm

// Panel is where an NR-wide panel of a convolution's output pixels starts:
// pixel Pix of image Img, the pixels of a batch numbered image by image.
type Panel struct {
	Img, Pix int
	// Whole says the panel's NR columns are consecutive pixels of one
	// image, so the kernel can store its tile in place.
	Whole bool
}

// PanelAt is the panel of cols (<= NR) output pixels starting at pixel c
// of the batch, whose images have npix pixels each.
func PanelAt(c, cols, npix int) Panel {
	return Panel{Img: c / npix, Pix: c % npix, Whole: cols == NR && c%npix+NR <= npix}
}

// WholeRun is how many panels from ps[0] on are whole and lie in ps[0]'s
// image (ps[0] itself must be whole), at most limit: the panels one
// KernelRun call can store in place, consecutive pixels of one image.
func WholeRun(ps []Panel, limit int) int {
	n := 1
	for n < limit && n < len(ps) && ps[n].Whole && ps[n].Img == ps[0].Img {
		n++
	}
	return n
}
