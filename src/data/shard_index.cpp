// Shard indexes (shard_index.h).
#include "data/shard_index.h"

#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "base/json_limits.h"
#include "base/strings.h"

namespace dlrun::data {

namespace {

constexpr uint64_t kMaxLabelBytes = 1 << 16;

int image_rank(const std::string& ext) {  // lower is preferred; 0: not an image
  const std::string e = lower(ext);
  return e == "jpg" ? 1 : e == "jpeg" ? 2 : e == "png" ? 3 : 0;
}

/// A label member's value; -1 when it holds no integer label.
int64_t parse_label(const std::string& ext, const std::string& text) {
  const std::string e = lower(ext);
  const std::string t = trim(text);
  if (e == "cls") {
    if (t.empty() || t.size() > 18 || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return -1;
    return std::stoll(t);
  }
  try {  // json
    nlohmann::json j = parse_json_capped(t, 8);
    if (j.is_object()) j = j.contains("label") ? j["label"] : j.contains("cls") ? j["cls"] : nlohmann::json();
    if (j.is_number_integer() && j.get<int64_t>() >= 0) return j.get<int64_t>();
  } catch (const std::exception&) {
  }
  return -1;
}

struct Pending {
  std::string key;
  int image_rank = 0;
  uint64_t offset = 0, size = 0;
  int64_t label = -1;
  bool label_seen = false;
};

}  // namespace

int64_t ShardIndex::samples() const {
  int64_t n = 0;
  for (const auto& s : shards) n += s.nsamples();
  return n;
}

ShardEntry index_tar(const ReadAt& read, uint64_t file_size, const std::string& url, const std::string& shown) {
  ShardEntry e;
  e.url = url;
  e.filesize = file_size;
  std::vector<TarMember> members = scan_tar(read, file_size, shown);
  Pending cur;
  bool open = false;
  // WebDataset reads a sample's files as one run of consecutive members: the same key further on
  // (GNU tar writes a folder in directory order unless told --sort=name) is the usual cause of a
  // sample that seems to lack its image or label.
  auto scattered = [&](const std::string& key, size_t run_end) {
    for (size_t i = run_end; i < members.size(); ++i)
      if (split_key(members[i].name).first == key) return true;
    return false;
  };
  size_t next = 0;  // the member after the current sample's run
  auto close = [&] {
    if (!open) return;
    DLRUN_CHECK_INPUT(!((cur.image_rank == 0 || !cur.label_seen) && scattered(cur.key, next)),
                      "shard {}: the files of sample {} are not adjacent in the tar (a sample's files must follow each "
                      "other, as WebDataset reads them): write the tar with `tar --sort=name` (GNU tar) or with "
                      "`dlrun data pack`", shown, cur.key);
    DLRUN_CHECK_INPUT(cur.image_rank > 0, "shard {}: sample {} has no image (.jpg, .jpeg or .png)", shown, cur.key);
    DLRUN_CHECK_INPUT(cur.label_seen, "shard {}: sample {} has no label (.cls, or .json with \"label\")", shown,
                      cur.key);
    e.offsets.push_back(cur.offset);
    e.sizes.push_back(cur.size);
    e.labels.push_back(cur.label);
    open = false;
  };
  for (const TarMember& m : members) {
    ++next;
    auto [key, ext] = split_key(m.name);
    const std::string base = key.substr(key.rfind('/') == std::string::npos ? 0 : key.rfind('/') + 1);
    if (ext.empty() || base.empty() || base.rfind("__", 0) == 0) continue;  // WebDataset skips these too
    if (!open || key != cur.key) {
      close();
      cur = Pending{};
      cur.key = key;
      open = true;
    }
    if (int r = image_rank(ext); r > 0) {
      if (cur.image_rank == 0 || r < cur.image_rank) {
        cur.image_rank = r;
        cur.offset = m.offset;
        cur.size = m.size;
      }
    } else if (lower(ext) == "cls" || lower(ext) == "json") {
      if (cur.label_seen && lower(ext) == "json") continue;  // .cls wins over .json
      DLRUN_CHECK_INPUT(m.size <= kMaxLabelBytes, "shard {}: label {} is {} bytes", shown, m.name, m.size);
      std::string text(m.size, '\0');
      if (m.size) read(m.offset, m.size, text.data());
      const int64_t label = parse_label(ext, text);
      DLRUN_CHECK_INPUT(label >= 0, "shard {}: label {} is not a non-negative integer", shown, m.name);
      cur.label = label;
      cur.label_seen = true;
    }
  }
  close();
  return e;
}

nlohmann::json index_to_json(const ShardIndex& index, const std::string& name) {
  nlohmann::json list = nlohmann::json::array();
  for (const ShardEntry& s : index.shards) {
    list.push_back({{"url", s.url},
                    {"nsamples", s.nsamples()},
                    {"filesize", s.filesize},
                    {"sha256", s.sha256},
                    {"dlrun", {{"offsets", s.offsets}, {"sizes", s.sizes}, {"labels", s.labels}}}});
  }
  nlohmann::json dl = {{"version", 1}, {"num_classes", index.num_classes}, {"channels", index.channels}};
  if (!index.class_names.empty()) dl["classes"] = index.class_names;
  return {{"__kind__", "wids-shard-index-v1"},
          {"wids_version", 1},
          {"name", name},
          {"shardlist", list},
          {"dlrun", dl}};
}

namespace {

// A count, size or offset of the index: a JSON integer, never a float (converting 4e74 to an
// integer type is undefined behaviour; fuzz_tar found it), never out of range.
int64_t int_of(const nlohmann::json& v, const std::string& file, const char* key) {
  const auto i = json_int64(v);
  DLRUN_CHECK_INPUT(i.has_value(), "shard index {}: {} must be an integer, got {}", file, key, v.dump().substr(0, 40));
  return *i;
}

uint64_t uint_of(const nlohmann::json& v, const std::string& file, const char* key) {
  const auto u = json_uint64(v);
  DLRUN_CHECK_INPUT(u.has_value(), "shard index {}: {} must be a non-negative integer, got {}", file, key,
                    v.dump().substr(0, 40));
  return *u;
}

}  // namespace

ShardIndex index_from_json(const std::string& text, const std::string& file, bool* has_tables) {
  nlohmann::json j;
  try {
    j = parse_json_capped(text, 16);
  } catch (const std::exception& e) {
    fail_input("shard index {} is not valid JSON: {}", file, e.what());
  }
  DLRUN_CHECK_INPUT(j.is_object() && j.contains("wids_version") && j["wids_version"].is_number_unsigned() &&
                        j["wids_version"].get<uint64_t>() == 1 && j.contains("shardlist") &&
                        j["shardlist"].is_array() && !j["shardlist"].empty(),
                    "shard index {} is not a wids shard index (wids_version 1 with a non-empty shardlist)", file);
  ShardIndex idx;
  const bool tables = j.contains("dlrun") && j["dlrun"].is_object();
  *has_tables = tables;
  try {
    if (tables) {
      idx.num_classes = int_of(j["dlrun"].at("num_classes"), file, "num_classes");
      const int64_t channels = int_of(j["dlrun"].at("channels"), file, "channels");
      DLRUN_CHECK_INPUT(channels == 1 || channels == 3, "shard index {}: channels must be 1 or 3", file);
      idx.channels = static_cast<int>(channels);
      if (const auto& dl = j["dlrun"]; dl.contains("classes")) {
        const auto& c = dl["classes"];
        DLRUN_CHECK_INPUT(c.is_array() && static_cast<int64_t>(c.size()) == idx.num_classes &&
                              std::all_of(c.begin(), c.end(), [](const auto& v) { return v.is_string(); }),
                          "shard index {}: classes must be {} names (num_classes), one per label", file,
                          idx.num_classes);
        for (const auto& v : c) idx.class_names.push_back(v.template get<std::string>());
      }
    }
    for (const auto& s : j["shardlist"]) {
      ShardEntry e;
      e.url = s.at("url").get<std::string>();
      const int64_t n = int_of(s.at("nsamples"), file, "nsamples");
      e.listed = n;
      DLRUN_CHECK_INPUT(n >= 0 && !e.url.empty(), "shard index {}: shard '{}' has a bad name or sample count", file,
                        e.url);
      if (tables) {
        e.filesize = uint_of(s.at("filesize"), file, "filesize");
        e.sha256 = s.at("sha256").get<std::string>();
        const auto& d = s.at("dlrun");
        DLRUN_CHECK_INPUT(d.at("offsets").is_array() && d.at("sizes").is_array() && d.at("labels").is_array(),
                          "shard index {}: shard {}: offsets, sizes and labels must be arrays", file, e.url);
        for (const auto& v : d.at("offsets")) e.offsets.push_back(uint_of(v, file, "an offset"));
        for (const auto& v : d.at("sizes")) e.sizes.push_back(uint_of(v, file, "a size"));
        for (const auto& v : d.at("labels")) e.labels.push_back(int_of(v, file, "a label"));
        DLRUN_CHECK_INPUT(static_cast<int64_t>(e.labels.size()) == n && e.offsets.size() == e.labels.size() &&
                              e.sizes.size() == e.labels.size(),
                          "shard index {}: shard {} lists {} samples but tables of {}/{}/{}", file, e.url, n,
                          e.offsets.size(), e.sizes.size(), e.labels.size());
        DLRUN_CHECK_INPUT(e.sha256.size() == 64, "shard index {}: shard {} has no SHA-256", file, e.url);
        for (size_t i = 0; i < e.labels.size(); ++i) {
          DLRUN_CHECK_INPUT(e.labels[i] >= 0 && e.labels[i] < idx.num_classes,
                            "shard index {}: shard {} sample {} has label {} outside [0, {})", file, e.url, i,
                            e.labels[i], idx.num_classes);
          DLRUN_CHECK_INPUT(e.sizes[i] <= kMaxTarMember && e.offsets[i] <= e.filesize &&
                                e.sizes[i] <= e.filesize - e.offsets[i],
                            "shard index {}: shard {} sample {} lies outside the shard's {} bytes", file, e.url, i,
                            e.filesize);
        }
      } else {
        // Only the names are used (load_index indexes the shards itself); the stated count is
        // kept as a number, never allocated (fuzz_tar, CI 2026-11-26: nsamples 5e15 asked for 43 PB).
        e.filesize = s.contains("filesize") ? uint_of(s["filesize"], file, "filesize") : 0;
      }
      idx.shards.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    fail_input("shard index {} is malformed: {}", file, e.what());
  }
  return idx;
}

}  // namespace dlrun::data
