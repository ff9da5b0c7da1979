// The events.args column: an event's typed attributes as one flat JSON object, so that the
// sqlite3 shell can ask json_extract(args, '$.bytes'). The format (docs/FORMATS.md):
//   - built-in keys by their builtinAttrName() ("bytes"), custom keys by their interned name;
//     a custom name that could be mistaken for something else (a built-in name, or one starting
//     with '@' or '#') is written as "@" + name; a key number without a name as "#<number>";
//   - Int as a JSON integer, Double always with '.' or an exponent (shortest text that reads back
//     to the same bits; NaN as null, infinities as +-1e999), String as a JSON string;
//   - keys in the attribute order, duplicates kept. Events without attributes store NULL.
// Own writer and reader (no JSON library): writing sits on the insert path, and reading must
// keep order, duplicates and the int/double distinction that general JSON libraries blur.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/core/model/events.h"
#include "trainscope/core/model/string_table.h"

namespace trainscope::core::tsdb {

// Appends the JSON object for attrs to out; string ids are resolved through strings.
void encodeArgs(std::span<const Attr> attrs, const StringTable& strings, std::string& out);

// Parses an args object into out (cleared first), interning key names and string values into
// strings. On malformed input returns false and says why in error.
bool decodeArgs(std::string_view json, StringTable& strings, std::vector<Attr>& out, std::string& error);

// The events.attrs column (added within schema version 2): the same attributes as args, binary, so that
// loading needs no JSON parsing. Per attribute, in order: a varint (key << 2 | type), then the
// value -- Int as a zigzag varint, Double as 8 little-endian bytes of its bits, String as a
// varint file string id. Custom keys are kCustomAttrBase + the file string id of their name.
// attrs must already name file string ids (custom keys and String values), not a store's.
void encodeAttrBlob(std::span<const Attr> attrs, std::string& out);

// Decodes an attrs blob into out (cleared first), string ids still the file's (each checked to
// be below fileStrings). Returns false with a reason on malformed input.
bool decodeAttrBlob(std::span<const unsigned char> blob, size_t fileStrings, std::vector<Attr>& out,
                    std::string& error);

// Appends s as a JSON string literal (quotes and escapes) to out.
void appendJsonString(std::string& out, std::string_view s);

}  // namespace trainscope::core::tsdb
