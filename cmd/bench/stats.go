package main

import (
	"math"
	"slices"
	"time"
)

// median returns the median of xs, or NaN when xs is empty. Medians rather than means are the
// headline numbers because the machine is shared: one stalled sample must not move the result.
func median(xs []float64) float64 {
	return percentile(xs, 50)
}

// percentile returns the p-th percentile (0 ≤ p ≤ 100) of xs by linear interpolation between
// closest ranks (the method of numpy's default), or NaN when xs is empty or p is out of range.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 || p < 0 || p > 100 || math.IsNaN(p) {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	if lo == hi {
		return s[lo]
	}
	frac := rank - float64(lo)
	return s[lo] + (s[hi]-s[lo])*frac
}

// medianCI returns an approximate 95% confidence interval of the median of xs from order
// statistics (the binomial method: ranks n/2 ± 1.96·√n/2), which assumes nothing about the
// distribution. It is what tells a real overhead from noise on a busy machine. NaNs when xs has
// fewer than 6 samples, too few for the interval to exclude the extremes.
func medianCI(xs []float64) (lo, hi float64) {
	n := len(xs)
	if n < 6 {
		return math.NaN(), math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	half := 1.96 * math.Sqrt(float64(n)) / 2
	j := max(1, int(math.Floor(float64(n)/2-half)))
	k := min(n, int(math.Ceil(float64(n)/2+half))+1)
	return s[j-1], s[k-1]
}

// mean returns the arithmetic mean of xs, or NaN when xs is empty. It is used for CPU time,
// whose per-sample readings are coarse (clock ticks) and only meaningful summed.
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// ratio returns a/b, or NaN when either is NaN or b is not positive: a ratio against a zero or
// missing measurement would be a meaningless infinity.
func ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b <= 0 {
		return math.NaN()
	}
	return a / b
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}

// msAll converts durations to fractional milliseconds.
func msAll(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

// overheadVerdict applies the daemon-overhead target: the daemon may add at most max(absMS,
// pct% of the bare turn) per turn. It returns the allowed overhead in ms and whether diffMS is
// within it. A NaN input never passes.
func overheadVerdict(diffMS, bareMS, absMS, pct float64) (allowedMS float64, ok bool) {
	if math.IsNaN(diffMS) || math.IsNaN(bareMS) {
		return math.NaN(), false
	}
	allowedMS = math.Max(absMS, bareMS*pct/100)
	return allowedMS, diffMS <= allowedMS
}
