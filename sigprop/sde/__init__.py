"""Neural covariance SDEs of Noci et al. (2023), "The Shaped Transformer".

The m x m token covariance V = X X^T / n of a width-n network converges, as depth d and width n grow with d/n -> T,
to the solution of dV = b(V) dt + Sigma(V)^{1/2} dB on t in [0, T], written on the m(m+1)/2 upper-triangle entries.

Modules (one idea each):

* :mod:`sigprop.sde.triu`             -- upper-triangle vectorisation, Sigma_lin, correlations;
* :mod:`sigprop.sde.residual_mlp`     -- Thm. 3.2 (residual shaped-ReLU MLP): nu(rho) of Eq. 6, b_res, Sigma_res;
* :mod:`sigprop.sde.shaped_attention` -- Thm. 4.2 (shaped attention, Eq. 9-10): b, Sigma with the A term;
* :mod:`sigprop.sde.transformer`      -- Cor. 4.3, Eq. 12 (shaped Transformer): sums of the above;
* :mod:`sigprop.sde.integrate`        -- batched Euler-Maruyama with PSD projection and recorded paths;
* :mod:`sigprop.sde.stopping`         -- Sec. 4.4 / Fig. 8 stopping times (an eigenvalue leaves [1e-4, 1e4]);
* :mod:`sigprop.sde.network`          -- finite networks, thousands at once, simulated exactly in law, V_l per layer;
* :mod:`sigprop.sde.experiments`      -- Figs. 1, 3, 4, 5, 7, 8: networks against the SDEs (``sigprop sde``);
* :mod:`sigprop.sde.plots`            -- their figures.
"""
