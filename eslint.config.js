// `npm run lint`: ESLint's and typescript-eslint's recommended rules over the sources, tests and scripts.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const node = { process: 'readonly', console: 'readonly', require: 'readonly', module: 'writable', URL: 'readonly' };

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      // `_name` marks a binding left unused on purpose (a field left out of a spread, a callback argument).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' }],
      // A node is declared before the link that delivers to it is made, then assigned once.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      '@typescript-eslint/no-unused-expressions': ['error', { allowTernary: true }],
    },
  },
  { files: ['**/*.mjs', '**/*.cjs', '**/*.js'], languageOptions: { globals: node } },
  { files: ['**/*.cjs'], rules: { '@typescript-eslint/no-require-imports': 'off' } },
  // chai's property assertions (`expect(x).to.be.true`) are expressions.
  { files: ['test/**/*.ts'], rules: { '@typescript-eslint/no-unused-expressions': 'off' } },
);
