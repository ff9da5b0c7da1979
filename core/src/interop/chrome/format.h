// Names shared by the Chrome trace exporter and importer: what Trainscope adds to the standard
// Chrome trace event format so that an exported file imports back into the same ranks, tracks
// and typed attributes. docs/FORMATS.md ("Chrome trace JSON") describes them for people.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace trainscope::core::chrome {

// otherData keys.
inline constexpr std::string_view kFormatKey = "trainscope_format";  // "1": written by us
inline constexpr std::string_view kFormatVersion = "1";
inline constexpr std::string_view kOriginKey = "trainscope_origin_ns";   // absolute ns, as a string
inline constexpr std::string_view kMetadataKey = "trainscope_metadata";  // TraceStore::metadata()

// Event members. "args.kind" names the EventKind; counters ("C") keep args for the plotted
// series only (Perfetto turns every arg of a "C" event into a series), so their kind and other
// attributes travel in this extra member, which viewers ignore.
inline constexpr std::string_view kKindArg = "kind";
inline constexpr std::string_view kCounterExtraArgs = "trainscope_args";
inline constexpr std::string_view kCounterSeries = "value";

// process_name args (one process per rank).
inline constexpr std::string_view kRankArg = "rank";
inline constexpr std::string_view kHostArg = "host";
inline constexpr std::string_view kOsPidArg = "os_pid";
inline constexpr std::string_view kLocalRankArg = "local_rank";
inline constexpr std::string_view kDeviceArg = "device";
inline constexpr std::string_view kClockOffsetArg = "clock_offset_ns";
inline constexpr std::string_view kDroppedArg = "dropped_events";

// thread_name args (one thread per track lane).
inline constexpr std::string_view kTrackNameArg = "track_name";
inline constexpr std::string_view kTrackKindArg = "track_kind";
inline constexpr std::string_view kTrackExternalIdArg = "track_external_id";
inline constexpr std::string_view kTrackLaneArg = "track_lane";

// Metadata the importer sets on the store.
inline constexpr std::string_view kSkippedEventsKey = "import_skipped_events";
inline constexpr std::string_view kImportFormatKey = "import_format";

// Microseconds written as a JSON number (its original text: "1234.567", "12", "1.5e3") to
// integer nanoseconds, exactly: the decimal digits are shifted, never multiplied in binary
// floating point. More than three decimals are rounded to the nearest ns (half away from
// zero). nullopt for text that is not a number or a result outside int64.
std::optional<int64_t> microsTextToNs(std::string_view text);

}  // namespace trainscope::core::chrome
