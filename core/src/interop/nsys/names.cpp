#include "interop/nsys/names.h"

#include <array>
#include <cctype>
#include <vector>

namespace trainscope::core::nsys {

std::optional<NcclKernel> parseNcclKernel(std::string_view name) {
  if (name.starts_with("void ")) name.remove_prefix(5);
  for (std::string_view prefix : {"ncclDevKernel_", "ncclKernel_"}) {
    if (!name.starts_with(prefix)) continue;
    name.remove_prefix(prefix.size());
    if (auto paren = name.find_first_of("(<"); paren != std::string_view::npos) name = name.substr(0, paren);
    std::vector<std::string_view> parts;
    for (size_t pos = 0; pos <= name.size();) {
      const size_t next = std::min(name.find('_', pos), name.size());
      parts.push_back(name.substr(pos, next - pos));
      pos = next + 1;
    }
    NcclKernel k;
    k.collective = parts.empty() ? std::string() : std::string(parts.front());
    if (k.collective.empty()) k.collective = "Unknown";
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string_view p = parts[i];
      if (p == "LL" || p == "LL128" || p == "SIMPLE") {
        k.protocol = std::string(p);
      } else if (p == "RING" || p == "TREE" || p == "NVLS" || p == "PAT" || p == "COLLNET") {
        k.algorithm = std::string(p);
        // COLLNET_DIRECT, COLLNET_CHAIN, NVLS_TREE: two-part names
        if (i + 1 < parts.size() &&
            (parts[i + 1] == "DIRECT" || parts[i + 1] == "CHAIN" || (p == "NVLS" && parts[i + 1] == "TREE")))
          k.algorithm += "_" + std::string(parts[++i]);
      }
    }
    return k;
  }
  return std::nullopt;
}

std::optional<int64_t> parseStepName(std::string_view n) {
  auto lower = [](std::string_view s) {
    std::string o(s);
    for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return o;
  };
  size_t digits = 0;
  if (n.starts_with("ProfilerStep#")) {
    digits = 13;
  } else {
    const std::string l = lower(n.substr(0, std::min<size_t>(n.size(), 10)));
    size_t p = 0;
    if (l.starts_with("step"))
      p = 4;
    else if (l.starts_with("iteration"))
      p = 9;
    else
      return std::nullopt;
    if (p < n.size() && (n[p] == ' ' || n[p] == '_' || n[p] == '#' || n[p] == ':')) ++p;
    digits = p;
  }
  if (digits >= n.size() || n.size() - digits > 15) return std::nullopt;
  int64_t v = 0;
  for (size_t i = digits; i < n.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(n[i]))) return std::nullopt;
    v = v * 10 + (n[i] - '0');
  }
  return v;
}

std::string_view memcpyKindShort(int64_t k) {
  static constexpr std::array<std::string_view, 14> kNames = {
      "Unknown", "HtoD", "DtoH", "HtoA", "AtoH",     "AtoA",     "AtoD",
      "DtoA",    "DtoD", "HtoH", "PtoP", "UVM HtoD", "UVM DtoH", "UVM DtoD"};
  return k >= 0 && k < static_cast<int64_t>(kNames.size()) ? kNames[static_cast<size_t>(k)] : "Unknown";
}

std::string memcpyKindFromEnum(std::string_view symbol) {
  if (symbol.starts_with("CUDA_MEMCPY_KIND_")) symbol.remove_prefix(17);
  std::string out;
  for (size_t pos = 0; pos <= symbol.size();) {
    const size_t next = std::min(symbol.find('_', pos), symbol.size());
    std::string_view t = symbol.substr(pos, next - pos);
    std::string word(t);
    if (t.size() == 4 && t.substr(1, 2) == "TO")  // HTOD -> HtoD
      word = std::string(1, t[0]) + "to" + t[3];
    else if (t == "UNKNOWN")
      word = "Unknown";
    if (!word.empty()) out += (out.empty() ? "" : " ") + word;
    pos = next + 1;
  }
  return out.empty() ? std::string("Unknown") : out;
}

}  // namespace trainscope::core::nsys
