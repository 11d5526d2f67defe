package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The checkpoint the reference benchmark loads: torchvision's ResNet-18
// ImageNet weights. The name's suffix is the start of the file's sha256.
const (
	ResNet18File = "resnet18-f37072fd.pth"
	ResNet18URL  = "https://download.pytorch.org/models/resnet18-f37072fd.pth"
)

// ErrHashMismatch reports a file whose sha256 does not start with the
// hash prefix in its name.
var ErrHashMismatch = errors.New("sha256 does not match the hash in the file name")

// hubHash matches torch.hub's naming: "<name>-<hex sha256 prefix>.<ext>".
var hubHash = regexp.MustCompile(`-([0-9a-f]{8,64})$`)

// hubHashPrefix returns the sha256 prefix a file name promises, if any.
func hubHashPrefix(p string) (string, bool) {
	base := filepath.Base(p)
	base = strings.TrimSuffix(base, filepath.Ext(base))
	m := hubHash.FindStringSubmatch(base)
	if m == nil {
		return "", false
	}
	return m[1], true
}

func checkHash(data []byte, want string) error {
	sum := sha256.Sum256(data)
	return compareHash(hex.EncodeToString(sum[:]), want)
}

func compareHash(got, want string) error {
	if !strings.HasPrefix(got, want) {
		return fmt.Errorf("%w: the name says sha256 %s..., the content's is %s (corrupt or truncated download?)", ErrHashMismatch, want, got[:len(want)])
	}
	return nil
}

// VerifyHubHash checks a file named the torch.hub way
// ("resnet18-f37072fd.pth": base name, '-', 8 or more hex digits of the
// sha256, extension) against its content. Names without such a suffix
// verify trivially (nil).
func VerifyHubHash(p string) error {
	want, ok := hubHashPrefix(p)
	if !ok {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hashing %s: %w", p, err)
	}
	if err := compareHash(hex.EncodeToString(h.Sum(nil)), want); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// HasHubHash reports whether a file name carries a torch.hub hash suffix,
// i.e. whether VerifyHubHash checks anything.
func HasHubHash(p string) bool {
	_, ok := hubHashPrefix(p)
	return ok
}

// Download fetches rawURL into dir under the URL's file name and returns
// its path. The body goes to a temporary file that is renamed into place
// only after the sha256 matches the hash suffix of the name (when it has
// one), so an interrupted or corrupt download leaves nothing behind.
// Progress lines go to progress (nil: none).
func Download(ctx context.Context, rawURL, dir string, progress io.Writer) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("download: %w", err)
	}
	name := path.Base(u.Path)
	if name == "" || name == "/" || name == "." {
		return "", fmt.Errorf("download %s: the URL names no file", rawURL)
	}
	if progress == nil {
		progress = io.Discard
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("download %s: %w", rawURL, err)
	}
	dst := filepath.Join(dir, name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return "", fmt.Errorf("download %s: %w", rawURL, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("download %s: %w", rawURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("download %s: HTTP %s", rawURL, resp.Status)
	}
	h := sha256.New()
	pw := &progressWriter{out: progress, total: resp.ContentLength, start: time.Now()}
	err = writeAtomic(dst, func(w io.Writer) error {
		n, err := io.Copy(io.MultiWriter(w, h, pw), resp.Body)
		if err != nil {
			return fmt.Errorf("after %d bytes: %w", n, err)
		}
		if resp.ContentLength >= 0 && n != resp.ContentLength {
			return fmt.Errorf("got %d bytes, the server announced %d", n, resp.ContentLength)
		}
		if want, ok := hubHashPrefix(name); ok {
			if err := compareHash(hex.EncodeToString(h.Sum(nil)), want); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("download %s: %w", rawURL, ctx.Err())
		}
		return "", fmt.Errorf("download %s: %w", rawURL, err)
	}
	pw.done(dst)
	return dst, nil
}

// progressWriter prints a line every tenth of the download (or every
// 16 MiB when the size is unknown).
type progressWriter struct {
	out   io.Writer
	total int64
	n     int64
	next  int64
	start time.Time
}

const mib = 1 << 20

func (p *progressWriter) Write(b []byte) (int, error) {
	p.n += int64(len(b))
	step := int64(16 * mib)
	if p.total > 0 {
		step = max(p.total/10, 1)
	}
	if p.n >= p.next {
		if p.total > 0 {
			fmt.Fprintf(p.out, "  %6.1f / %.1f MiB (%3d%%)\n", float64(p.n)/mib, float64(p.total)/mib, p.n*100/p.total)
		} else {
			fmt.Fprintf(p.out, "  %6.1f MiB\n", float64(p.n)/mib)
		}
		p.next = (p.n/step + 1) * step
	}
	return len(b), nil
}

func (p *progressWriter) done(dst string) {
	d := time.Since(p.start)
	fmt.Fprintf(p.out, "downloaded %s: %.1f MiB in %.1fs (%.1f MiB/s)\n", dst, float64(p.n)/mib, d.Seconds(), float64(p.n)/mib/max(d.Seconds(), 1e-9))
}
