// The dataset-format registry (src/data/dataset_formats.h): every row complete, each format's folder
// recognized as that format and no other, and the choices, refusals and messages made from the rows.
#include "data/dataset_formats.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "kiln/data.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;

// The smallest folder of each format that detection recognizes (its files need not be readable).
// A new row fails EachFormatRecognizesItsOwnFolderOnly until its folder is added here.
void make_folder_of(const std::string& format, const fs::path& dir) {
  fs::create_directories(dir);
  if (format == "idx") write_bytes((dir / "train-images-idx3-ubyte").string(), {});
  if (format == "cifar10") write_bytes((dir / "test_batch.bin").string(), {});
  if (format == "packed") write_bytes((dir / "kiln-pack.json").string(), {});
  if (format == "imagefolder") fs::create_directories(dir / "cat");
}

TEST(DatasetFormats, EveryRowIsCompleteAndNamedOnce) {
  std::set<std::string> names;
  for (const DatasetFormat& f : dataset_formats()) {
    SCOPED_TRACE(f.name);
    EXPECT_TRUE(names.insert(f.name).second) << "two rows named " << f.name;
    EXPECT_NE(std::string(f.name), "auto");  // --format's word for detection
    EXPECT_FALSE(std::string(f.description).empty());
    EXPECT_NE(f.detect, nullptr);
    EXPECT_NE(f.open, nullptr);
    // A format read into memory says how to get its data when the folder is missing.
    EXPECT_EQ(f.load != nullptr, f.missing_fix != nullptr);
    ASSERT_NE(f.test_split_name, nullptr);
    EXPECT_NE(f.test_split_name("/d/digits", "").find("/d/digits"), std::string::npos);
  }
  EXPECT_EQ(names, (std::set<std::string>{"idx", "cifar10", "packed", "imagefolder"}));
}

// Messages name the test split in each format's own terms; an image folder's is a folder, --val
// when given, and its classes are folders (the one-class and no-validation-folder messages say so).
TEST(DatasetFormats, EachFormatNamesItsTestSplit) {
  EXPECT_EQ(find_dataset_format("idx")->test_split_name("d", ""), "the test set (d/t10k-images-idx3-ubyte)");
  EXPECT_EQ(find_dataset_format("cifar10")->test_split_name("d", ""), "the test set (test_batch.bin of d)");
  EXPECT_EQ(find_dataset_format("packed")->test_split_name("d", ""), "the validation split of d");
  const DatasetFormat& folder = *find_dataset_format("imagefolder");
  EXPECT_EQ(folder.test_split_name("d", ""), "the validation folder d/val");
  EXPECT_EQ(folder.test_split_name("d", "v"), "the validation folder v");
  std::set<std::string> class_folders;
  for (const DatasetFormat& f : dataset_formats())
    if (f.class_folders) class_folders.insert(f.name);
  EXPECT_EQ(class_folders, (std::set<std::string>{"imagefolder"}));
}

TEST(DatasetFormats, EachFormatRecognizesItsOwnFolderOnly) {
  TempDir dir;
  for (const DatasetFormat& f : dataset_formats()) {
    const fs::path folder = dir.path() / f.name;
    make_folder_of(f.name, folder);
    EXPECT_EQ(detect_dataset_format(folder.string()), f.name);
    for (const DatasetFormat& other : dataset_formats())
      if (&other != &f && other.detect(folder))
        ADD_FAILURE() << "a folder of " << f.name << " is also recognized as " << other.name;
  }
}

TEST(DatasetFormats, TheChoicesAreAutoAndTheRows) {
  EXPECT_EQ(chosen_dataset_format("auto"), nullptr);
  for (const DatasetFormat& f : dataset_formats()) EXPECT_EQ(chosen_dataset_format(f.name), &f);
  EXPECT_EQ(find_dataset_format("jpeg"), nullptr);
  EXPECT_EQ(dataset_format_choices(), "auto, idx, cifar10, packed or imagefolder");
  EXPECT_EQ(dataset_format_choices("auto (detected)"), "auto (detected), idx, cifar10, packed or imagefolder");
  expect_error([] { chosen_dataset_format("jpeg"); },
               {"unknown dataset format 'jpeg': use auto, idx, cifar10, packed or imagefolder"});
  DataOptions o;
  o.format = "IDX";  // names are exact
  expect_error([&] { open_dataset("data/digits", o); }, {"unknown dataset format 'IDX'"});
}

TEST(DatasetFormats, AFolderNoFormatRecognizesListsWhatEachLooksFor) {
  TempDir dir;
  write_bytes(dir.file("notes.txt"), {'x'});
  const std::string message = error_of([&] { detect_dataset_format(dir.path().string()); });
  EXPECT_NE(message.find("cannot tell what dataset folder"), std::string::npos) << message;
  for (const DatasetFormat& f : dataset_formats())
    EXPECT_NE(message.find(std::string("no ") + f.description), std::string::npos) << f.name << ": " << message;
  EXPECT_NE(message.find("name the format with --format"), std::string::npos) << message;
}

TEST(DatasetFormats, LoadDatasetReadsTheInMemoryFormatsOnly) {
  TempDir dir;
  // A format read file by file is sent to open_dataset; an unknown one hears the formats it may use.
  expect_error([&] { load_dataset(dir.path().string(), "imagefolder", true); },
               {"'imagefolder' is read file by file", "open_dataset", "'idx' or 'cifar10'"});
  expect_error([&] { load_dataset(dir.path().string(), "jpeg", true); },
               {"unknown dataset format 'jpeg': use 'idx' or 'cifar10'"});
  // A missing folder of an in-memory format: the row's way to get the data.
  for (const DatasetFormat& f : dataset_formats())
    if (f.load)
      expect_error([&] { load_dataset((dir.path() / "missing").string(), f.name, true); },
                   {"does not exist", f.missing_fix});
}

TEST(DatasetFormats, OpenDatasetOpensTheFolderByTheRowItDetectsOrIsGiven) {
  TempDir dir;
  Dataset ds;
  ds.count = 2, ds.height = 2, ds.width = 2, ds.channels = 1, ds.num_classes = 2;
  ds.images = {0, 1, 2, 3, 4, 5, 6, 7};
  ds.labels = {0, 1};
  write_idx(ds, dir.file("train-images-idx3-ubyte"), dir.file("train-labels-idx1-ubyte"));
  write_idx(ds, dir.file("t10k-images-idx3-ubyte"), dir.file("t10k-labels-idx1-ubyte"));
  DataOptions o;
  for (const std::string format : {"auto", "idx"}) {
    o.format = format;
    const DataSplits splits = open_dataset(dir.path().string(), o);
    EXPECT_EQ(splits.format, "idx") << format;
    ASSERT_NE(splits.train_data, nullptr) << format;  // an in-memory format keeps its Dataset
    EXPECT_EQ(splits.train->count(), 2) << format;
    EXPECT_EQ(splits.test->count(), 2) << format;
  }
  // Given another format, that row reads the folder (and refuses it in its own terms).
  o.format = "cifar10";
  expect_error([&] { open_dataset(dir.path().string(), o); }, {"data_batch_1.bin"});
}

}  // namespace
}  // namespace kiln
