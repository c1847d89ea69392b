#include "sim/openb.h"

#include <csv.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gpufed::sim {
namespace {

struct CsvRow {
  int line = 0;  // physical line the row starts on
  std::vector<std::string> cells;
};

// What libcsv's callbacks fill in.
struct Collector {
  int line = 0;  // current physical line
  int row_start = 0;
  std::vector<std::string> cells;
  std::vector<CsvRow> rows;
};

void OnField(void* data, size_t len, void* user) {
  auto* c = static_cast<Collector*>(user);
  if (c->cells.empty()) c->row_start = c->line;
  if (data == nullptr) {
    c->cells.emplace_back();
  } else {
    c->cells.emplace_back(static_cast<const char*>(data), len);
  }
}

void OnRowEnd(int /*terminator*/, void* user) {
  auto* c = static_cast<Collector*>(user);
  c->rows.push_back(CsvRow{c->row_start, std::move(c->cells)});
  c->cells.clear();
}

// Splits CSV text into rows of cells with libcsv (strict quoting). Text is fed one physical
// line at a time so that a syntax error can name its line.
absl::StatusOr<std::vector<CsvRow>> SplitCsv(absl::string_view text, absl::string_view origin) {
  csv_parser parser;
  if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) != 0) {
    return absl::ResourceExhaustedError("libcsv: cannot initialise the parser");
  }
  Collector collector;
  absl::Status status;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == absl::string_view::npos ? text.size() : end + 1;
    ++collector.line;
    const size_t len = end - pos;
    if (csv_parse(&parser, text.data() + pos, len, OnField, OnRowEnd, &collector) != len) {
      status = absl::InvalidArgumentError(absl::StrCat(
          origin, ":", collector.line, ": malformed CSV: ", csv_strerror(csv_error(&parser))));
      break;
    }
    pos = end;
  }
  if (status.ok() && csv_fini(&parser, OnField, OnRowEnd, &collector) != 0) {
    status = absl::InvalidArgumentError(absl::StrCat(
        origin, ":", collector.line, ": malformed CSV: ", csv_strerror(csv_error(&parser)),
        " (an unterminated quoted field?)"));
  }
  csv_free(&parser);
  if (!status.ok()) return status;
  return std::move(collector.rows);
}

// The header row, resolved to column positions.
class Columns {
 public:
  static absl::StatusOr<Columns> Of(const std::vector<CsvRow>& rows, absl::string_view origin,
                                    const std::vector<std::string>& required) {
    if (rows.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": empty file; expected a header row with ", absl::StrJoin(required, ",")));
    }
    Columns cols;
    cols.origin_ = std::string(origin);
    cols.header_line_ = rows[0].line;
    for (size_t i = 0; i < rows[0].cells.size(); ++i) {
      cols.index_[std::string(absl::StripAsciiWhitespace(rows[0].cells[i]))] = i;
    }
    cols.width_ = rows[0].cells.size();
    for (const std::string& name : required) {
      if (!cols.index_.contains(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ":", cols.header_line_, ": header lacks column '", name,
                         "' (expected ", absl::StrJoin(required, ","), ")"));
      }
    }
    return cols;
  }

  [[nodiscard]] bool Has(const std::string& name) const { return index_.contains(name); }
  [[nodiscard]] size_t width() const { return width_; }
  [[nodiscard]] const std::string& origin() const { return origin_; }

  absl::Status CheckWidth(const CsvRow& row) const {
    if (row.cells.size() != width_) {
      return absl::InvalidArgumentError(absl::StrCat(origin_, ":", row.line, ": expected ", width_,
                                                     " cells like the header, got ",
                                                     row.cells.size()));
    }
    return absl::OkStatus();
  }

  // The raw cell (whitespace trimmed); empty if the column is absent.
  [[nodiscard]] absl::string_view Text(const CsvRow& row, const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) return {};
    return absl::StripAsciiWhitespace(row.cells[it->second]);
  }

  absl::Status CellError(const CsvRow& row, const std::string& name, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ":", row.line, ": column ",
                                                   index_.at(name) + 1, " (", name, "): ", what));
  }

  // A required non-negative integer.
  absl::StatusOr<uint64_t> Uint(const CsvRow& row, const std::string& name) const {
    absl::string_view text = Text(row, name);
    uint64_t value = 0;
    if (!absl::SimpleAtoi(text, &value)) {
      return CellError(row, name, absl::StrCat("'", text, "' is not a non-negative integer"));
    }
    return value;
  }

  // An optional non-negative integer: empty or "nan" is unset.
  absl::StatusOr<std::optional<int64_t>> OptionalTime(const CsvRow& row,
                                                      const std::string& name) const {
    if (!Has(name)) return std::optional<int64_t>();
    absl::string_view text = Text(row, name);
    if (IsNone(text)) return std::optional<int64_t>();
    int64_t value = 0;
    if (!absl::SimpleAtoi(text, &value) || value < 0) {
      return CellError(row, name,
                       absl::StrCat("'", text, "' is not a time in seconds (integer >= 0)"));
    }
    return std::optional<int64_t>(value);
  }

  static bool IsNone(absl::string_view text) {
    return text.empty() || absl::EqualsIgnoreCase(text, "nan");
  }

 private:
  std::string origin_;
  int header_line_ = 0;
  size_t width_ = 0;
  std::map<std::string, size_t> index_;
};

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", std::generic_category().message(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return text.str();
}

}  // namespace

uint64_t OpenbPod::GpuMilli() const {
  if (SharesGpu()) return uint64_t{num_gpu} * gpu_milli;
  return uint64_t{num_gpu} * 1000;
}

absl::StatusOr<std::vector<OpenbNode>> ParseOpenbNodes(absl::string_view text,
                                                       absl::string_view origin) {
  absl::StatusOr<std::vector<CsvRow>> rows = SplitCsv(text, origin);
  if (!rows.ok()) return rows.status();
  absl::StatusOr<Columns> cols =
      Columns::Of(*rows, origin, {"sn", "cpu_milli", "memory_mib", "gpu", "model"});
  if (!cols.ok()) return cols.status();

  std::vector<OpenbNode> nodes;
  nodes.reserve(rows->size());
  std::set<std::string, std::less<>> seen;
  for (size_t r = 1; r < rows->size(); ++r) {
    const CsvRow& row = (*rows)[r];
    if (absl::Status s = cols->CheckWidth(row); !s.ok()) return s;
    OpenbNode node;
    node.line = row.line;
    node.sn = std::string(cols->Text(row, "sn"));
    if (node.sn.empty()) return cols->CellError(row, "sn", "empty node name");
    if (!seen.insert(node.sn).second) {
      return cols->CellError(row, "sn", absl::StrCat("node '", node.sn, "' appears twice"));
    }
    absl::StatusOr<uint64_t> v = cols->Uint(row, "cpu_milli");
    if (!v.ok()) return v.status();
    node.cpu_milli = *v;
    v = cols->Uint(row, "memory_mib");
    if (!v.ok()) return v.status();
    node.memory_mib = *v;
    v = cols->Uint(row, "gpu");
    if (!v.ok()) return v.status();
    if (*v > 1024) return cols->CellError(row, "gpu", absl::StrCat(*v, " GPUs on one node"));
    node.gpus = static_cast<uint32_t>(*v);
    absl::string_view model = cols->Text(row, "model");
    if (!Columns::IsNone(model)) node.model = std::string(model);
    if (node.gpus > 0 && node.model.empty()) {
      return cols->CellError(row, "model", "a node with GPUs needs a GPU model");
    }
    nodes.push_back(std::move(node));
  }
  return nodes;
}

absl::StatusOr<std::vector<OpenbPod>> ParseOpenbPods(absl::string_view text,
                                                     absl::string_view origin) {
  absl::StatusOr<std::vector<CsvRow>> rows = SplitCsv(text, origin);
  if (!rows.ok()) return rows.status();
  absl::StatusOr<Columns> cols =
      Columns::Of(*rows, origin, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"});
  if (!cols.ok()) return cols.status();

  std::vector<OpenbPod> pods;
  pods.reserve(rows->size());
  for (size_t r = 1; r < rows->size(); ++r) {
    const CsvRow& row = (*rows)[r];
    if (absl::Status s = cols->CheckWidth(row); !s.ok()) return s;
    OpenbPod pod;
    pod.line = row.line;
    pod.name = std::string(cols->Text(row, "name"));
    if (pod.name.empty()) return cols->CellError(row, "name", "empty pod name");
    absl::StatusOr<uint64_t> v = cols->Uint(row, "cpu_milli");
    if (!v.ok()) return v.status();
    pod.cpu_milli = *v;
    v = cols->Uint(row, "memory_mib");
    if (!v.ok()) return v.status();
    pod.memory_mib = *v;
    v = cols->Uint(row, "num_gpu");
    if (!v.ok()) return v.status();
    if (*v > 1024) return cols->CellError(row, "num_gpu", absl::StrCat(*v, " GPUs for one pod"));
    pod.num_gpu = static_cast<uint32_t>(*v);
    v = cols->Uint(row, "gpu_milli");
    if (!v.ok()) return v.status();
    if (*v > 1000) {
      return cols->CellError(row, "gpu_milli",
                             absl::StrCat(*v, " is more than one GPU (1000 milli-GPUs)"));
    }
    if (pod.num_gpu > 0 && *v == 0) {
      return cols->CellError(row, "gpu_milli",
                             "0 for a pod with GPUs (1000 is a whole GPU, less a share)");
    }
    pod.gpu_milli = static_cast<uint32_t>(*v);

    if (absl::string_view spec = cols->Text(row, "gpu_spec"); !Columns::IsNone(spec)) {
      for (absl::string_view model : absl::StrSplit(spec, '|')) {
        model = absl::StripAsciiWhitespace(model);
        if (model.empty()) {
          return cols->CellError(row, "gpu_spec",
                                 absl::StrCat("'", spec, "' has an empty model name"));
        }
        pod.gpu_spec.emplace_back(model);
      }
    }
    pod.qos = std::string(cols->Text(row, "qos"));
    pod.pod_phase = std::string(cols->Text(row, "pod_phase"));
    for (auto [name, field] : {std::pair{"creation_time", &pod.creation_time},
                               std::pair{"deletion_time", &pod.deletion_time},
                               std::pair{"scheduled_time", &pod.scheduled_time}}) {
      absl::StatusOr<std::optional<int64_t>> t = cols->OptionalTime(row, name);
      if (!t.ok()) return t.status();
      *field = *t;
    }
    if (pod.creation_time && pod.deletion_time && *pod.deletion_time < *pod.creation_time) {
      return cols->CellError(
          row, "deletion_time",
          absl::StrCat(*pod.deletion_time, " is before creation_time ", *pod.creation_time));
    }
    pods.push_back(std::move(pod));
  }
  return pods;
}

absl::StatusOr<std::vector<OpenbNode>> ReadOpenbNodes(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return ParseOpenbNodes(*text, path);
}

absl::StatusOr<std::vector<OpenbPod>> ReadOpenbPods(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return ParseOpenbPods(*text, path);
}

}  // namespace gpufed::sim
