// The Attention Residuals oracle instantiated for double.
#include "oracle/attnres_impl.hpp"

namespace fc::oracle {

template AttnResPhase1<double> attnres_phase1_forward<double>(const AttnResShape&, std::span<const double>, std::span<const double>);
template std::vector<double> attnres_phase2_forward<double>(const AttnResShape&, std::span<const double>, std::span<const double>,
                                                    std::span<const double>, std::span<const double>);
template AttnResPhase2Grads<double> attnres_phase2_backward<double>(const AttnResShape&, std::span<const double>, std::span<const double>,
                                                            std::span<const double>, std::span<const double>, std::span<const double>);
template AttnResPhase1Grads<double> attnres_phase1_backward<double>(const AttnResShape&, std::span<const double>, std::span<const double>,
                                                            std::span<const double>, std::span<const double>);
template std::vector<double> attnres_forward<double>(const AttnResShape&, std::span<const double>, std::span<const double>,
                                             std::span<const double>);
template AttnResGrads<double> attnres_backward<double>(const AttnResShape&, std::span<const double>, std::span<const double>,
                                               std::span<const double>, std::span<const double>);

}  // namespace fc::oracle
