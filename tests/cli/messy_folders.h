#pragma once
// What the CLI tests of messy image folders share: kiln runs under a time limit (a scan that loops
// fails the test instead of hanging it), and small folders of 20x20 PNGs that train in a second.
#include <gtest/gtest.h>

#include <filesystem>

#include <fmt/format.h>

#include "data/image/image_codec.h"
#include "support/kiln_cli.h"
#include "support/temp_dir.h"
#include "support/test_pictures.h"

namespace kiln::testing::messy {

namespace fs = std::filesystem;

using testing::kiln_within;

// Every kiln run of these tests under a time limit.
inline Result kiln(const std::string& args) { return kiln_within(120, args); }

inline void put(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  write_bytes(path.string(), bytes);
}

// A folder of `classes` classes, `per_class` 20x20 PNGs each in train/ and val/.
inline fs::path small_pngs(const fs::path& dir, int classes = 2, int per_class = 4) {
  for (const char* split : {"train", "val"})
    for (int c = 0; c < classes; ++c)
      for (int i = 0; i < per_class; ++i) {
        const std::vector<uint8_t> p = picture(20, 20, 1, uint32_t(100 * c + i + (split[0] == 'v' ? 50 : 0)));
        put(dir / split / fmt::format("c{}", c) / fmt::format("{}.png", i), encode_png(p.data(), 20, 20, 1));
      }
  return dir;
}

// A short CPU run: tiny batches, one epoch, the small model.
inline std::string train_args(const fs::path& data, int epochs = 1) {
  return fmt::format("train --model digits_cnn --device cpu --epochs {} --batch 2 --lr 0.01 --workers 1 --data {}",
                     epochs, data.string());
}

}  // namespace kiln::testing::messy
