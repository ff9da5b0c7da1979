// Seq1F1B's segments in trainscope-train. The transformer cuts every sequence of a micro-batch
// along time into k segments of equal FLOPs (core::partitionSequence; later segments are
// shorter because they attend to longer prefixes), and a segment's attention reads the keys and
// values of the earlier segments (transformer.cpp). The MLP has no sequence axis (a sample is
// one row): there seq1f1b cuts the micro-batch's samples into k near-equal slices, which gives
// the schedule's shape; rows are independent, so the mathematics is the same either way.
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace trainscope::train {

// Why k segments do not fit a micro-batch of `microBatchSamples` samples (empty when they do):
// the transformer needs k <= --seq-len, the MLP k <= the samples.
std::string checkSegments(const Options& o, int microBatchSamples, int k);

// The transformer's segment boundaries: k + 1 positions from 0 to --seq-len, by
// core::partitionSequence with P = `params` (the model's matrix parameters: all but the
// embedding's), L = --layers, d = --width. Empty when checkSegments refuses k.
std::vector<int> segmentBounds(const Options& o, int k, double params);

// "16 tokens -> 7 5 4" for logs.
std::string describeSegments(const std::vector<int>& bounds);

}  // namespace trainscope::train
