# One image for the gateway (default), the admin API and the maintenance worker:
#   docker run fleet-ratelimit                             → demo gateway (dist/demo/server.js)
#   docker run fleet-ratelimit node dist/admin/server.js   → admin API
#   docker run fleet-ratelimit node dist/admin/worker.js   → BullMQ worker
FROM node:20.19-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No scripts yet: `prepare` builds, and the sources come next.
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.base.json tsconfig.build.json index.ts ./
COPY lib lib
COPY bus bus
COPY middleware middleware
COPY admin admin
COPY demo demo
COPY scripts scripts
# express, helmet, bullmq, ioredis and pino are the package's peers (devDependencies here); this image runs the
# demo gateway, the admin API and the worker, so it installs them at the versions tested. They become the
# image's production dependencies in the same install that drops every other dev dependency: under
# --omit=dev npm leaves out a package the manifest lists as a dev dependency even when it is named on
# the command line. The lockfile keeps every version as tested.
RUN npm run build:runtime \
 && npm install --save-prod --save-exact --omit=dev --ignore-scripts --no-audit --no-fund \
      $(node -p "['express', 'helmet', 'bullmq', 'ioredis', 'pino'].map((n) => n + '@' + require('./package.json').devDependencies[n]).join(' ')")

FROM node:20.19-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/dist dist
COPY demo/policy.json demo/policy.json
USER node
EXPOSE 3000 3001 7000
# /healthz on the gateway's PORT, or the admin API's ADMIN_PORT when that is set.
HEALTHCHECK --interval=5s --timeout=2s --start-period=15s --retries=5 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.ADMIN_PORT || process.env.PORT || 3000) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
CMD ["node", "dist/demo/server.js"]
