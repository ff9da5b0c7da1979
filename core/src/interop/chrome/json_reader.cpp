#include "interop/chrome/json_reader.h"

#include <string>
#include <utility>
#include <vector>

namespace trainscope::core::chrome {

namespace {

const char* jsonTypeName(Json::value_t t) {
  switch (t) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    default:
      return "a value";
  }
}

// The nlohmann SAX interface (see nlohmann::json_sax). Every callback returns false to stop.
class Handler {
 public:
  Handler(std::string_view source, const std::function<Status(const RawEvent&)>& onEvent, ReadResult& result)
      : source_(source), onEvent_(onEvent), result_(result) {}

  const Status& status() const { return status_; }
  bool sawEvents() const { return sawEvents_; }

  bool null() { return scalar(Json(nullptr)); }
  bool boolean(bool v) { return scalar(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return scalar(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return scalar(Json(v)); }
  bool number_float(Json::number_float_t v, const std::string& text) {
    // Only the event's own ts/dur need their digits (chrome_format.h: microsTextToNs).
    if (buildingEvent_ && stack_.size() == 1) {
      if (key_ == "ts")
        tsText_ = text;
      else if (key_ == "dur")
        durText_ = text;
    }
    return scalar(Json(v));
  }
  bool string(std::string& v) {
    if (building() && v.size() > kMaxStringBytes)
      return fail(where() + ": a string of " + std::to_string(v.size()) + " bytes (limit " +
                  std::to_string(kMaxStringBytes) + "; not a trace a profiler writes)");
    return scalar(Json(std::move(v)));
  }
  bool binary(Json::binary_t&) { return scalar(Json(nullptr)); }  // not produced by JSON text
  bool key(std::string& k) {
    if (building()) {
      if (++members_.back() > kMaxObjectMembers)
        return fail(where() + ": an object with more than " + std::to_string(kMaxObjectMembers) +
                    " members (limit; not a trace a profiler writes)");
      if (k.size() > kMaxStringBytes)
        return fail(where() + ": a key of " + std::to_string(k.size()) + " bytes (limit " +
                    std::to_string(kMaxStringBytes) + ")");
      key_ = std::move(k);
    } else {
      topKey_ = std::move(k);
    }
    return true;
  }
  bool start_object(std::size_t) { return open(Json::value_t::object); }
  bool start_array(std::size_t) { return open(Json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    std::string what = ex.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 3: ..." -> drop the tag.
    if (auto p = what.find("] "); p != std::string::npos && what.front() == '[') what.erase(0, p + 2);
    status_ = Status(ErrorCode::MalformedJson, std::string(source_) + ": malformed JSON at byte " +
                                                   std::to_string(position) + ": " + what);
    return false;
  }

 private:
  enum class Where { Root, TopObject, EventsArray, Done };

  bool building() const { return !stack_.empty(); }
  std::string where() const {
    return buildingEvent_ ? "event #" + std::to_string(eventIndex_) : "top-level member \"" + topKey_ + "\"";
  }
  bool fail(std::string message) {
    status_ = Status(ErrorCode::BadTrace, std::string(source_) + ": " + std::move(message));
    return false;
  }

  // Where a value that is not inside a DOM under construction goes.
  bool scalar(Json&& v) {
    if (building()) {
      (void)add(std::move(v));
      return true;
    }
    switch (where_) {
      case Where::Root:
        return fail(std::string("not a Chrome trace: the top-level value is ") + jsonTypeName(v.type()) +
                    ", not an object or an array of events");
      case Where::TopObject:
        if (topKey_ == "traceEvents") return fail("not a Chrome trace: \"traceEvents\" is not an array");
        result_.topLevel[topKey_] = std::move(v);
        return true;
      case Where::EventsArray:
        return fail("event #" + std::to_string(eventIndex_) + " is " + jsonTypeName(v.type()) +
                    ", not an object");
      case Where::Done:
        return true;
    }
    return true;
  }

  Json* add(Json&& v) {
    Json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    Json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }

  bool open(Json::value_t type) {
    if (building()) {
      if (stack_.size() >= kMaxJsonDepth) {
        const std::string where =
            buildingEvent_ ? "event #" + std::to_string(eventIndex_) : "top-level member \"" + topKey_ + "\"";
        return fail(where + ": nested deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels (limit; not a trace a profiler writes)");
      }
      stack_.push_back(add(Json(type)));
      members_.push_back(0);
      return true;
    }
    switch (where_) {
      case Where::Root:
        if (type == Json::value_t::array) {
          where_ = Where::EventsArray;
          sawEvents_ = true;
        } else {
          where_ = Where::TopObject;
          result_.objectForm = true;
        }
        return true;
      case Where::TopObject:
        if (topKey_ == "traceEvents") {
          if (type != Json::value_t::array)
            return fail("not a Chrome trace: \"traceEvents\" is not an array");
          where_ = Where::EventsArray;
          sawEvents_ = true;
          return true;
        }
        doc_ = Json(type);
        stack_.push_back(&doc_);
        members_.push_back(0);
        return true;
      case Where::EventsArray:
        if (type != Json::value_t::object)
          return fail("event #" + std::to_string(eventIndex_) + " is an array, not an object");
        doc_ = Json(type);
        stack_.push_back(&doc_);
        members_.push_back(0);
        buildingEvent_ = true;
        tsText_.clear();
        durText_.clear();
        return true;
      case Where::Done:
        return fail("unexpected data after the trace");
    }
    return true;
  }

  bool close() {
    if (building()) {
      stack_.pop_back();
      members_.pop_back();
      if (building()) return true;
      if (!buildingEvent_) {  // a finished top-level member
        result_.topLevel[topKey_] = std::move(doc_);
        return true;
      }
      buildingEvent_ = false;
      view_.assign(doc_);
      const RawEvent ev{eventIndex_++, &view_.root(), tsText_, durText_};
      ++result_.events;
      if (Status st = onEvent_(ev); !st) {
        status_ = std::move(st);
        return false;
      }
      doc_ = Json();
      return true;
    }
    // Closing a container of the trace's own structure.
    if (where_ == Where::EventsArray)
      where_ = result_.objectForm ? Where::TopObject : Where::Done;
    else if (where_ == Where::TopObject)
      where_ = Where::Done;
    return true;
  }

  std::string_view source_;
  const std::function<Status(const RawEvent&)>& onEvent_;
  ReadResult& result_;
  Status status_;
  Where where_ = Where::Root;
  bool sawEvents_ = false;
  std::string topKey_;
  std::string key_;
  Json doc_;                  // the event or top-level member being built
  JsonDoc view_;              // doc_ as the importer reads events
  std::vector<Json*> stack_;  // open containers of doc_, innermost last
  std::vector<size_t> members_;  // keys seen so far in each open container (objects; 0 for arrays)
  bool buildingEvent_ = false;
  size_t eventIndex_ = 0;
  std::string tsText_, durText_;
};

}  // namespace

namespace {

template <typename Parse>
Status readWith(std::string_view sourceName, const std::function<Status(const RawEvent&)>& onEvent,
                ReadResult& result, Parse&& parse) {
  Handler handler(sourceName, onEvent, result);
  // nlohmann's SAX parser keeps its own state stack (no recursion), so deep nesting cannot
  // overflow the C++ stack; the handler refuses more than kMaxJsonDepth levels inside an event.
  const bool ok = parse(handler);
  if (!ok) {
    if (!handler.status().isOk()) return handler.status();
    return Status(ErrorCode::MalformedJson, std::string(sourceName) + ": malformed JSON");
  }
  if (!handler.sawEvents())
    return Status(ErrorCode::BadTrace,
                  std::string(sourceName) + ": not a Chrome trace: no \"traceEvents\" array");
  return Status::ok();
}

}  // namespace

Status readChromeJson(std::string_view text, std::string_view sourceName,
                      const std::function<Status(const RawEvent&)>& onEvent, ReadResult& result) {
  return readWith(sourceName, onEvent, result,
                  [&](Handler& h) { return Json::sax_parse(text.begin(), text.end(), &h); });
}

Status readChromeJson(std::istream& in, std::string_view sourceName,
                      const std::function<Status(const RawEvent&)>& onEvent, ReadResult& result) {
  return readWith(sourceName, onEvent, result, [&](Handler& h) { return Json::sax_parse(in, &h); });
}

}  // namespace trainscope::core::chrome
