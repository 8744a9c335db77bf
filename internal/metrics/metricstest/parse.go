// Package metricstest reads a Prometheus text exposition for tests: values are looked up by
// metric name and labels after parsing with expfmt, never by matching strings in the text.
package metricstest

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Parse reads a text exposition.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	f, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse exposition: %w", err)
	}
	return f, nil
}

// Scrape GETs url with the optional bearer token and parses the answer, which must be 200.
func Scrape(c *http.Client, url, token string) (Families, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// The text format: the default answer of promhttp without content negotiation.
	req.Header.Set("Accept", "text/plain")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, b)
	}
	return Parse(resp.Body)
}

// Labels selects a series: every listed label must have the value; unlisted labels may have any.
type Labels map[string]string

func (f Families) find(name string, want Labels) (*dto.MetricFamily, []*dto.Metric) {
	mf := f[name]
	if mf == nil {
		return nil, nil
	}
	var out []*dto.Metric
	for _, m := range mf.GetMetric() {
		ok := true
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
					break
				}
			}
			ok = ok && found
		}
		if ok {
			out = append(out, m)
		}
	}
	return mf, out
}

// Value sums the counter, gauge or untyped values of name's series that match labels; ok is false
// when name has no such series.
func (f Families) Value(name string, labels Labels) (v float64, ok bool) {
	mf, ms := f.find(name, labels)
	for _, m := range ms {
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			v += m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			v += m.GetGauge().GetValue()
		default:
			v += m.GetUntyped().GetValue()
		}
	}
	return v, len(ms) > 0
}

// MustValue is Value for a series the test needs: a missing one fails the test at once.
func (f Families) MustValue(t testing.TB, name string, labels Labels) float64 {
	t.Helper()
	v, ok := f.Value(name, labels)
	if !ok {
		t.Fatalf("no series %s%v in the scrape", name, labels)
	}
	return v
}

// HistogramCount sums the sample counts of histogram name's series that match labels.
func (f Families) HistogramCount(name string, labels Labels) (n uint64, ok bool) {
	_, ms := f.find(name, labels)
	for _, m := range ms {
		n += m.GetHistogram().GetSampleCount()
	}
	return n, len(ms) > 0
}

// HistogramSum sums the sample sums of histogram name's series that match labels.
func (f Families) HistogramSum(name string, labels Labels) float64 {
	_, ms := f.find(name, labels)
	var s float64
	for _, m := range ms {
		s += m.GetHistogram().GetSampleSum()
	}
	return s
}

// LabelValues lists the values label takes across name's series.
func (f Families) LabelValues(name, label string) []string {
	_, ms := f.find(name, nil)
	var out []string
	for _, m := range ms {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				out = append(out, lp.GetValue())
			}
		}
	}
	return out
}
