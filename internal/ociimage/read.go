package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Image is an image archive read into memory: its manifest, configuration
// and blobs by digest.
type Image struct {
	Digest   string // the manifest's
	Ref      string
	Manifest Manifest
	Config   Config
	blobs    map[string][]byte
}

// Read reads an image archive Build wrote (an OCI layout in a tar) and
// checks every blob against its digest.
func Read(path string) (*Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[h.Name] = b
	}
	img := &Image{blobs: map[string][]byte{}}
	for name, b := range files {
		hexd, ok := strings.CutPrefix(name, "blobs/sha256/")
		if !ok {
			continue
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != hexd {
			return nil, fmt.Errorf("%s: blob %s does not match its digest", path, hexd)
		}
		img.blobs["sha256:"+hexd] = b
	}
	var idx Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		return nil, fmt.Errorf("%s: index.json: %w", path, err)
	}
	if len(idx.Manifests) != 1 {
		return nil, fmt.Errorf("%s: %d manifests, want 1", path, len(idx.Manifests))
	}
	img.Digest, img.Ref = idx.Manifests[0].Digest, idx.Manifests[0].Annotations[RefNameAnnotation]
	if err := json.Unmarshal(img.blobs[img.Digest], &img.Manifest); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", path, err)
	}
	if err := json.Unmarshal(img.blobs[img.Manifest.Config.Digest], &img.Config); err != nil {
		return nil, fmt.Errorf("%s: config: %w", path, err)
	}
	return img, nil
}

// Layer returns layer i uncompressed.
func (img *Image) Layer(i int) ([]byte, error) {
	b, ok := img.blobs[img.Manifest.Layers[i].Digest]
	if !ok {
		return nil, fmt.Errorf("layer %d (%s) missing", i, img.Manifest.Layers[i].Digest)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// Files lists the paths of every layer's entries, in order ("usr/sbin/nft").
func (img *Image) Files() ([]string, error) {
	var out []string
	for i := range img.Manifest.Layers {
		raw, err := img.Layer(i)
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(bytes.NewReader(raw))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			out = append(out, strings.TrimPrefix(filepath.Clean("/"+h.Name), "/"))
		}
	}
	return out, nil
}

// Unpack writes the image's root file system into dir (which must be
// empty or missing): every layer in order; device nodes are skipped (the
// runtime makes /dev), and no entry may leave dir.
func (img *Image) Unpack(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range img.Manifest.Layers {
		raw, err := img.Layer(i)
		if err != nil {
			return err
		}
		if err := unpackLayer(raw, dir); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return nil
}

func unpackLayer(raw []byte, dir string) error {
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		rel := filepath.Clean("/" + h.Name)
		if rel == "/" {
			continue
		}
		p := filepath.Join(dir, rel)
		if base := filepath.Base(rel); strings.HasPrefix(base, ".wh.") {
			return errors.New("whiteouts are not supported: " + rel)
		}
		if err := inside(dir, filepath.Dir(p)); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		mode := os.FileMode(h.Mode).Perm() | os.FileMode(h.Mode)&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			_ = os.Remove(p)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.Remove(p)
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
			continue
		case tar.TypeLink:
			target := filepath.Join(dir, filepath.Clean("/"+h.Linkname))
			_ = os.Remove(p)
			if err := os.Link(target, p); err != nil {
				return err
			}
			continue
		default:
			continue // devices, fifos: the runtime provides /dev
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	}
}

// inside checks that directory p, its symlinks followed, is still in dir: a
// layer's symlink must not lead a later entry out of the root.
func inside(dir, p string) error {
	for { // the nearest ancestor that exists: what a MkdirAll would follow
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, os.ErrNotExist) || p == dir {
			break
		}
		p = filepath.Dir(p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if real != root && !strings.HasPrefix(real, root+string(filepath.Separator)) {
		return fmt.Errorf("leads out of the root (%s)", real)
	}
	return nil
}
