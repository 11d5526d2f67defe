package jpeg_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"goinfer/internal/imageproc"
)

// want.json (tools/images/jpeg_fixtures.py) holds the SHA-256 of the RGB
// pixels PIL (libjpeg-turbo) decodes from each fixture and photo.
type pilDigest struct {
	Width, Height int
	Mode          string
	SHA256        string
}

// TestMatchesPIL decodes every fixture and committed photo through
// imageproc (this decoder, then libjpeg's upsampling and color conversion)
// and requires PIL's pixels bit for bit.
func TestMatchesPIL(t *testing.T) {
	b, err := os.ReadFile("../../testdata/jpeg/want.json")
	if err != nil {
		t.Fatal(err)
	}
	var want struct{ Files map[string]pilDigest }
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(want.Files))
	for n := range want.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		w := want.Files[name]
		t.Run(filepath.Base(name), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("../..", name))
			if err != nil {
				t.Fatal(err)
			}
			m, err := imageproc.DecodeBytes(data, imageproc.MaxPixels)
			if err != nil {
				t.Fatal(err)
			}
			if m.W != w.Width || m.H != w.Height {
				t.Fatalf("%dx%d, PIL %dx%d", m.W, m.H, w.Width, w.Height)
			}
			sum := sha256.Sum256(m.Pix)
			if got := hex.EncodeToString(sum[:]); got != w.SHA256 {
				t.Errorf("%s (PIL mode %s): RGB pixels differ from PIL's", name, w.Mode)
			}
		})
	}
}
