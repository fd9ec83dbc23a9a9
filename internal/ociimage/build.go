// Package ociimage writes and reads the product's container image as an OCI
// image layout in one tar archive (what `skopeo copy oci-archive:...` and
// `podman load` take), without a registry or a container engine: `make
// image` builds it from a Debian root (mmdebstrap) and the static binary,
// and the e2e unpacks it for runc. Everything written is a function of its
// inputs and the epoch (SOURCE_DATE_EPOCH): entries in input order, every
// time clamped to the epoch, gzip without a timestamp, so the same commit
// gives the same digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Media types of the OCI image specification.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	// RefNameAnnotation names the image in index.json.
	RefNameAnnotation = "org.opencontainers.image.ref.name"
)

// File is one file the image adds on top of its base root.
type File struct {
	// Path inside the image, without a leading "/" ("usr/local/bin/x").
	Path string
	Mode int64
	Data []byte
}

// Spec describes an image: a base root (a tar, as mmdebstrap writes it),
// files on top of it (their own layer), and the image configuration.
type Spec struct {
	BaseTar    string
	BaseDoc    string // what made the base (the config's history)
	Files      []File
	FilesDoc   string
	Epoch      time.Time
	Arch       string // GOARCH naming: amd64, arm64
	Entrypoint []string
	Cmd        []string
	Env        []string
	Labels     map[string]string
	Ref        string // the ref name in index.json (the version)
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is an OCI image index (index.json).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Config is the part of the OCI image configuration this package writes.
type Config struct {
	Created      string       `json:"created"`
	Architecture string       `json:"architecture"`
	OS           string       `json:"os"`
	Config       ImageConfig  `json:"config"`
	RootFS       RootFS       `json:"rootfs"`
	History      []HistoryRow `json:"history"`
}

// ImageConfig is the execution part of Config.
type ImageConfig struct {
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// RootFS lists the layers' uncompressed digests.
type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// HistoryRow says what made a layer.
type HistoryRow struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type blob struct {
	digest string
	data   []byte
}

func newBlob(b []byte) blob {
	sum := sha256.Sum256(b)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: b}
}

// Build writes the image archive to w and returns its manifest's digest.
func Build(w io.Writer, s Spec) (string, error) {
	epoch := s.Epoch.UTC().Truncate(time.Second)
	base, err := os.Open(s.BaseTar)
	if err != nil {
		return "", err
	}
	defer base.Close()
	baseTar, err := normalizedTar(base, epoch)
	if err != nil {
		return "", fmt.Errorf("base root %s: %w", s.BaseTar, err)
	}
	filesTar, err := filesLayer(s.Files, epoch)
	if err != nil {
		return "", err
	}
	created := epoch.Format(time.RFC3339)
	var layers []Descriptor
	var diffIDs []string
	var blobs []blob
	for _, raw := range [][]byte{baseTar, filesTar} {
		diffIDs = append(diffIDs, newBlob(raw).digest)
		gz, err := gzipped(raw)
		if err != nil {
			return "", err
		}
		b := newBlob(gz)
		blobs = append(blobs, b)
		layers = append(layers, Descriptor{MediaType: MediaTypeLayer, Digest: b.digest, Size: int64(len(gz))})
	}
	cfg := Config{Created: created, Architecture: s.Arch, OS: "linux",
		Config:  ImageConfig{Entrypoint: s.Entrypoint, Cmd: s.Cmd, Env: s.Env, Labels: s.Labels},
		RootFS:  RootFS{Type: "layers", DiffIDs: diffIDs},
		History: []HistoryRow{{Created: created, CreatedBy: s.BaseDoc}, {Created: created, CreatedBy: s.FilesDoc}}}
	cb, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	config := newBlob(cb)
	blobs = append(blobs, config)
	mb, err := json.Marshal(Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: Descriptor{MediaType: MediaTypeConfig, Digest: config.digest, Size: int64(len(cb))}, Layers: layers})
	if err != nil {
		return "", err
	}
	manifest := newBlob(mb)
	blobs = append(blobs, manifest)
	ib, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{{MediaType: MediaTypeManifest,
		Digest: manifest.digest, Size: int64(len(mb)), Annotations: map[string]string{RefNameAnnotation: s.Ref}}}})
	if err != nil {
		return "", err
	}

	tw := tar.NewWriter(w)
	add := func(name string, data []byte) error {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
			return "", err
		}
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return "", err
	}
	if err := add("index.json", ib); err != nil {
		return "", err
	}
	for _, b := range blobs {
		if err := add("blobs/sha256/"+strings.TrimPrefix(b.digest, "sha256:"), b.data); err != nil {
			return "", err
		}
	}
	return manifest.digest, tw.Close()
}

// normalizedTar copies a tar with every time clamped to epoch and the
// access and change times dropped (PAX records too).
func normalizedTar(r io.Reader, epoch time.Time) ([]byte, error) {
	var out bytes.Buffer
	tr := tar.NewReader(r)
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		h.ModTime = clamp(h.ModTime, epoch)
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		for _, k := range []string{"mtime", "atime", "ctime"} {
			delete(h.PAXRecords, k)
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func clamp(t, epoch time.Time) time.Time {
	if t.After(epoch) {
		return epoch
	}
	return t.UTC().Truncate(time.Second)
}

// filesLayer is the layer of files, with their parent directories first.
func filesLayer(files []File, epoch time.Time) ([]byte, error) {
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	dirs := map[string]bool{}
	for _, f := range files {
		parts := strings.Split(strings.TrimPrefix(f.Path, "/"), "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: strings.Join(parts, "/"), Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// gzipped compresses b with a header that carries no time and no name.
func gzipped(b []byte) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
