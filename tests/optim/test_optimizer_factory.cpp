// make_optimizer: each HF `optim` name builds its optimizer with HF Trainer's options, optim_args
// are parsed and checked, and unknown names or keys are refused with messages naming them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "optim/adafactor.h"
#include "optim/adamw.h"
#include "optim/lion.h"
#include "optim/lomo.h"
#include "optim/optimizer_factory.h"
#include "optim/sgd.h"

namespace headroom {
namespace {

std::vector<NamedTensor> named_params() {
  return {{"w", Tensor::zeros({4, 3}).set_requires_grad(true)},
          {"b", Tensor::zeros({3}).set_requires_grad(true)}};
}

std::unique_ptr<Optimizer> build(const std::string& optim, const std::string& optim_args = "") {
  OptimizerArguments args;
  args.optim = optim;
  args.learning_rate = 0.02;
  args.weight_decay = 0.1;
  args.adam_beta1 = 0.8;
  args.adam_beta2 = 0.95;
  args.optim_args = optim_args;
  return make_optimizer(args, named_params());
}

std::string error_text(const std::string& optim, const std::string& optim_args) {
  try {
    build(optim, optim_args);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(OptimizerFactory, EveryNameBuildsItsOptimizer) {
  for (const std::string& name : optimizer_names()) {
    const auto optimizer = build(name);
    ASSERT_NE(optimizer, nullptr) << name;
    // Weight decay on the matrix only, as HF Trainer groups parameters.
    ASSERT_EQ(optimizer->param_groups().size(), 2u) << name;
    EXPECT_EQ(*optimizer->param_groups()[0].weight_decay, 0.1) << name;
    EXPECT_EQ(*optimizer->param_groups()[1].weight_decay, 0.0) << name;
  }
  EXPECT_NE(dynamic_cast<AdamW*>(build("adamw_torch").get()), nullptr);
  EXPECT_NE(dynamic_cast<SGD*>(build("sgd").get()), nullptr);
  EXPECT_NE(dynamic_cast<Lion*>(build("lion").get()), nullptr);
  EXPECT_NE(dynamic_cast<Lion*>(build("lion_32bit").get()), nullptr);
  EXPECT_NE(dynamic_cast<Adafactor*>(build("adafactor").get()), nullptr);
  EXPECT_NE(dynamic_cast<Lomo*>(build("lomo").get()), nullptr);
}

TEST(OptimizerFactory, SgdHasNoMomentumUnlessOptimArgsGiveIt) {
  const auto plain = build("sgd");
  const SGDOptions& o = dynamic_cast<SGD&>(*plain).options();
  EXPECT_EQ(o.momentum, 0.0);
  EXPECT_FALSE(o.nesterov);
  EXPECT_EQ(plain->lr(), 0.02);
  const auto nesterov = build("sgd", "momentum=0.9, nesterov=True");
  EXPECT_EQ(dynamic_cast<SGD&>(*nesterov).options().momentum, 0.9);
  EXPECT_TRUE(dynamic_cast<SGD&>(*nesterov).options().nesterov);
}

TEST(OptimizerFactory, LionTakesTheAdamBetas) {
  const auto lion = build("lion_32bit");
  const LionOptions& o = dynamic_cast<Lion&>(*lion).options();
  EXPECT_EQ(o.beta1, 0.8);
  EXPECT_EQ(o.beta2, 0.95);
  EXPECT_EQ(lion->lr(), 0.02);
  EXPECT_EQ(lion->name(), "lion");
}

TEST(OptimizerFactory, AdafactorIsHfTrainers) {
  const auto trainer = build("adafactor");
  const AdafactorOptions& o = dynamic_cast<Adafactor&>(*trainer).options();
  EXPECT_FALSE(o.scale_parameter);
  EXPECT_FALSE(o.relative_step);
  EXPECT_EQ(o.lr, 0.02);
  const auto relative = build("adafactor", "relative_step=True,scale_parameter=True,beta1=0.9");
  const AdafactorOptions& r = dynamic_cast<Adafactor&>(*relative).options();
  EXPECT_TRUE(r.relative_step);
  EXPECT_TRUE(r.scale_parameter);
  EXPECT_FALSE(r.lr.has_value());
  EXPECT_EQ(r.beta1, 0.9);
}

TEST(OptimizerFactory, LomoTakesClippingFromOptimArgs) {
  const auto lomo = build("lomo", "clip_grad_norm=1.0,clip_grad_value=5");
  const LomoOptions& o = dynamic_cast<Lomo&>(*lomo).options();
  EXPECT_EQ(o.clip_grad_norm, 1.0);
  EXPECT_EQ(o.clip_grad_value, 5.0);
  EXPECT_TRUE(lomo->updates_in_backward());
  EXPECT_EQ(lomo->backward_passes(), 2);
  EXPECT_EQ(build("lomo")->backward_passes(), 1);
}

TEST(OptimizerFactory, BadNamesAndOptimArgsAreNamedInTheError) {
  EXPECT_NE(error_text("adam_9bit", "").find("optim: unknown optimizer 'adam_9bit' (one of "),
            std::string::npos);
  EXPECT_NE(error_text("adam_9bit", "").find("lomo"), std::string::npos);
  EXPECT_EQ(error_text("sgd", "momentun=0.9"), "optim_args: 'momentun' is not an option of sgd");
  EXPECT_EQ(error_text("lion", "momentum=0.9"), "optim_args: 'momentum' is not an option of lion");
  EXPECT_EQ(error_text("sgd", "momentum=fast"), "optim_args: momentum=fast is not a number (sgd)");
  EXPECT_EQ(error_text("adafactor", "relative_step=maybe"),
            "optim_args: relative_step=maybe is not True or False (adafactor)");
  EXPECT_EQ(error_text("lomo", "clip_grad_norm"),
            "optim_args: entry 'clip_grad_norm' is not key=value");
  EXPECT_EQ(error_text("lomo", "clip_grad_norm=-1"),
            "Lomo: clip_grad_norm should be positive, got -1");
}

// Note [Precision recipes]: Kahan-compensated updates are AdamW's; the other optimizers refuse
// them rather than round another way.
TEST(OptimizerFactory, OnlyAdamWTakesKahanSummation) {
  OptimizerArguments args;
  args.kahan_summation = true;
  auto error_of = [&](const std::string& optim) -> std::string {
    args.optim = optim;
    try {
      make_optimizer(args, named_params());
    } catch (const ValueError& e) {
      return e.what();
    }
    return "no error";
  };
  for (const std::string& name : optimizer_names()) {
    if (name == "adamw_torch" || name == "adamw_bf16") {
      args.optim = name;
      const auto optimizer = make_optimizer(args, named_params());
      EXPECT_TRUE(dynamic_cast<const AdamW&>(*optimizer).options().kahan_summation) << name;
    } else {
      EXPECT_NE(error_of(name).find("optim " + name + " has no Kahan"), std::string::npos)
          << error_of(name);
    }
  }
  // An unknown name is still reported as one.
  EXPECT_NE(error_of("adamw_9bit").find("unknown optimizer"), std::string::npos);
}

}  // namespace
}  // namespace headroom
