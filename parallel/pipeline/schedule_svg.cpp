// parallel/pipeline/schedule_svg.cpp — a pipeline timeline as SVG (schedule.h's draw_svg), written
// here with no library: rects and text, a picture any browser renders.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include "multigrad/parallel/pipeline/schedule.h"

namespace mg::parallel {
namespace {

constexpr int kLeft = 70, kTop = 44, kRowHeight = 26, kGap = 2, kLegend = 36;

// A forward's or backward's fill, lighter for each later chunk (chunk 0 full colour).
std::string fill(const Action& a, int chunks) {
  if (a.micro_batch < 0) return "#e4e4e4";
  const bool forward = a.kind == ActionKind::Forward;
  const double rgb[3] = {forward ? 72.0 : 238.0, forward ? 120.0 : 133.0, forward ? 208.0 : 74.0};
  const double lighten = chunks > 1 ? 0.55 * a.chunk / (chunks - 1) : 0.0;  // towards white
  char text[8];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", int(rgb[0] + (255 - rgb[0]) * lighten),
                int(rgb[1] + (255 - rgb[1]) * lighten), int(rgb[2] + (255 - rgb[2]) * lighten));
  return text;
}

std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

}  // namespace

std::string draw_svg(const Timeline& timeline, const std::string& title) {
  const int stages = int(timeline.slots.size());
  const int slots = stages == 0 ? 0 : int(timeline.slots[0].size());
  int chunks = 1;
  for (const std::vector<Action>& row : timeline.slots)
    for (const Action& a : row) chunks = std::max(chunks, a.chunk + 1);
  const int cell = std::clamp(900 / std::max(slots, 1), 4, 30);  // about 900 pixels of slots
  const int width = std::max(kLeft + slots * cell + 20, 760), height = kTop + stages * kRowHeight + kLegend;
  const bool labelled = cell >= 22;  // room for "F12" in a box
  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kLeft << "\" y=\"24\" font-size=\"15\">" << escaped(title) << "</text>\n";
  for (int s = 0; s < stages; ++s) {
    const int y = kTop + s * kRowHeight;
    out << "<text x=\"" << kLeft - 8 << "\" y=\"" << y + kRowHeight / 2 + 4
        << "\" font-size=\"12\" text-anchor=\"end\">stage " << s << "</text>\n";
    for (int t = 0; t < slots; ++t) {
      const Action& a = timeline.slots[size_t(s)][size_t(t)];
      const bool idle = a.micro_batch < 0;
      const char* kind = idle ? "idle" : a.kind == ActionKind::Forward ? "forward" : "backward";
      const int x = kLeft + t * cell;
      out << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell - kGap << "\" height=\""
          << kRowHeight - kGap << "\" fill=\"" << fill(a, chunks) << "\" data-stage=\"" << s << "\" data-slot=\"" << t
          << "\" data-kind=\"" << kind << "\" data-micro-batch=\"" << a.micro_batch << "\" data-chunk=\""
          << (idle ? -1 : a.chunk) << "\"/>\n";
      if (labelled && !idle) {
        std::string label(1, a.kind == ActionKind::Forward ? 'F' : 'B');
        label += std::to_string(a.micro_batch);
        if (chunks > 1) label.append(".").append(std::to_string(a.chunk));
        out << "<text x=\"" << x + (cell - kGap) / 2 << "\" y=\"" << y + kRowHeight / 2 + 3
            << "\" font-size=\"" << (label.size() > 3 ? 8 : 10) << "\" text-anchor=\"middle\" fill=\"" << (a.chunk == 0 ? "white" : "#333")
            << "\">" << label
            << "</text>\n";
      }
    }
  }
  const int legend_y = kTop + stages * kRowHeight + 14;
  const std::pair<const char*, std::string> keys[] = {{"forward", fill({ActionKind::Forward, 0, 0}, 1)},
                                                      {"backward", fill({ActionKind::Backward, 0, 0}, 1)},
                                                      {"idle (bubble)", fill({ActionKind::Forward, -1, 0}, 1)}};
  int x = kLeft;
  for (const auto& [name, colour] : keys) {
    out << "<rect x=\"" << x << "\" y=\"" << legend_y << "\" width=\"12\" height=\"12\" fill=\"" << colour << "\"/>"
        << "<text x=\"" << x + 16 << "\" y=\"" << legend_y + 10 << "\" font-size=\"12\">" << name << "</text>\n";
    x += 110;
  }
  out << "<text x=\"" << x << "\" y=\"" << legend_y + 10 << "\" font-size=\"12\" fill=\"#666\">one column = one slot"
      << (chunks > 1 ? " (a chunk's forward or backward); later chunks lighter" : " (a forward or a backward)")
      << "</text>\n</svg>\n";
  return out.str();
}

}  // namespace mg::parallel
