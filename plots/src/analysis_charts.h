// Builders of the AnalysisPanel's charts (one function per chart, analysis_charts*.cpp).
#pragma once

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/plots/analysis_panel.h"

namespace trainscope::plots {

ChartTab* makeStepTimeChart(const core::AnalysisResult& r);
ChartTab* makeBreakdownChart(const core::AnalysisResult& r);
ChartTab* makeBubbleChart(const core::AnalysisResult& r);
ChartTab* makeBucketOverlapChart(const core::AnalysisResult& r);
ChartTab* makeBandwidthChart(const core::AnalysisResult& r);
ChartTab* makeDiscoChart(const core::AnalysisResult& r);
ChartTab* makeRanksChart(const core::AnalysisResult& r);  // rank_heatmap.cpp

// CSV field: numbers with full precision, NaN as empty.
QString csvNumber(double v);

}  // namespace trainscope::plots
